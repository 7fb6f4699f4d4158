package scripted_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/model/scripted"
)

func mustParse(tb testing.TB, s string) *scripted.Model {
	tb.Helper()
	m, err := scripted.Parse([]byte(s))
	if err != nil {
		tb.Fatalf("Parse: %v", err)
	}
	return m
}

// answerAll appends resp's assistant message and one tool message per call,
// whose content answer computes.
func answerAll(msgs []loop.Message, resp *loop.Response, answer func(loop.ToolCall) string) []loop.Message {
	msgs = append(msgs, resp.Message)
	for _, tc := range resp.Message.ToolCalls {
		msgs = append(msgs, loop.Message{Role: "tool", ToolCallID: tc.ID, Content: answer(tc)})
	}
	return msgs
}

func TestParseArguments(t *testing.T) {
	m := mustParse(t, `{"turns":[{"tool_calls":[
		{"id":"v","name":"calculator","arguments":{ "expression" : "2+2",  "n": [1, 2.50, {"a": null}] }},
		{"id":"s","name":"calculator","arguments":"{not json"},
		{"id":"e","name":"calculator","arguments":""},
		{"id":"q","name":"calculator","arguments":"{\"quoted\":true}"},
		{"id":"n","name":"calculator","arguments":null},
		{"id":"k","name":"calculator","arguments":42},
		{"id":"a","name":"calculator"},
		{"name":"../etc/passwd","arguments":{}},
		{"id":"","name":"","arguments":{}},
		{"id":"v","name":"calculator","arguments":{}}
	]}]}`)
	resp, err := m.Complete(t.Context(), loop.Request{Messages: []loop.Message{{Role: "user", Content: "go"}}})
	if err != nil {
		t.Fatal(err)
	}
	want := []struct{ id, name, args string }{
		{"v", "calculator", `{"expression":"2+2","n":[1,2.50,{"a":null}]}`},
		{"s", "calculator", `{not json`},
		{"e", "calculator", ``},
		{"q", "calculator", `{"quoted":true}`},
		{"n", "calculator", `null`},
		{"k", "calculator", `42`},
		{"a", "calculator", `{}`},
		{"call_1_8", "../etc/passwd", `{}`},
		{"", "", `{}`},
		{"v", "calculator", `{}`},
	}
	got := resp.Message.ToolCalls
	if len(got) != len(want) {
		t.Fatalf("calls=%d, want %d", len(got), len(want))
	}
	for i, w := range want {
		tc := got[i]
		if tc.ID != w.id || tc.Function.Name != w.name || tc.Function.Arguments != w.args || tc.Type != "function" {
			t.Errorf("call %d = %+v, want id=%q name=%q args=%q", i, tc, w.id, w.name, w.args)
		}
	}
	if resp.FinishReason != "tool_calls" || resp.Message.Role != "assistant" {
		t.Errorf("finish=%q role=%q", resp.FinishReason, resp.Message.Role)
	}
}

func TestParseGenerator(t *testing.T) {
	m := mustParse(t, `{"turns":[
		{"tool_calls":[{"id":"first","name":"echo"}],
		 "calls":{"name":"echo","count":1000,"arguments":{"text":"x"},"id_prefix":"e"}},
		{"calls":{"name":"calculator","count":2}}
	]}`)
	resp, err := m.Complete(t.Context(), loop.Request{})
	if err != nil {
		t.Fatal(err)
	}
	calls := resp.Message.ToolCalls
	if len(calls) != 1001 {
		t.Fatalf("calls=%d, want 1001", len(calls))
	}
	if calls[0].ID != "first" || calls[1].ID != "e-1" || calls[1000].ID != "e-1000" {
		t.Errorf("ids %q %q %q", calls[0].ID, calls[1].ID, calls[1000].ID)
	}
	seen := map[string]bool{}
	for _, c := range calls[1:] {
		if seen[c.ID] || c.Function.Name != "echo" || c.Function.Arguments != `{"text":"x"}` {
			t.Fatalf("generated call %+v (duplicate=%v)", c, seen[c.ID])
		}
		seen[c.ID] = true
	}
	// Mutating a response does not change the script.
	calls[1].ID = "changed"
	again, _ := m.Complete(t.Context(), loop.Request{})
	if again.Message.ToolCalls[1].ID != "e-1" {
		t.Errorf("script changed through a response: %q", again.Message.ToolCalls[1].ID)
	}

	resp2, err := m.Complete(t.Context(), loop.Request{Messages: []loop.Message{{Role: "assistant"}}})
	if err != nil {
		t.Fatal(err)
	}
	if got := resp2.Message.ToolCalls; len(got) != 2 || got[0].ID != "gen2-1" || got[1].ID != "gen2-2" || got[1].Function.Arguments != "{}" {
		t.Errorf("default prefix calls=%+v", got)
	}
}

func TestPositionFollowsTranscript(t *testing.T) {
	m := mustParse(t, `{"turns":[{"content":"one"},{"content":"two"},{"content":"three"}]}`)
	for n, want := range []string{"one", "two", "three", scripted.EndedContent, scripted.EndedContent} {
		var msgs []loop.Message
		msgs = append(msgs, loop.Message{Role: "system"}, loop.Message{Role: "user"})
		for range n {
			msgs = append(msgs, loop.Message{Role: "assistant"}, loop.Message{Role: "tool"}, loop.Message{Role: "user"})
		}
		resp, err := m.Complete(t.Context(), loop.Request{Messages: msgs})
		if err != nil {
			t.Fatal(err)
		}
		if resp.Message.Content != want || resp.FinishReason != "stop" || len(resp.Message.ToolCalls) != 0 {
			t.Errorf("after %d assistant messages: %+v, want %q", n, resp, want)
		}
	}
}

func TestConcurrentRuns(t *testing.T) {
	m := mustParse(t, `{"turns":[
		{"tool_calls":[{"id":"a","name":"echo"}]},
		{"tool_calls":[{"id":"b","name":"echo"}]},
		{"content":"a={{result \"a\"}} b={{result \"b\"}}"}
	]}`)
	const runs = 16
	var wg sync.WaitGroup
	errs := make(chan error, runs)
	for r := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			msgs := []loop.Message{{Role: "user", Content: fmt.Sprint(r)}}
			for round := 0; ; round++ {
				resp, err := m.Complete(t.Context(), loop.Request{Messages: msgs})
				if err != nil {
					errs <- err
					return
				}
				if len(resp.Message.ToolCalls) == 0 {
					if want := fmt.Sprintf("a=run%d-round0 b=run%d-round1", r, r); resp.Message.Content != want {
						errs <- fmt.Errorf("run %d: %q, want %q", r, resp.Message.Content, want)
					}
					return
				}
				msgs = answerAll(msgs, resp, func(loop.ToolCall) string { return fmt.Sprintf("run%d-round%d", r, round) })
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestTemplating(t *testing.T) {
	transcript := []loop.Message{
		{Role: "user", Content: "go"},
		{Role: "assistant", ToolCalls: []loop.ToolCall{{ID: "c1"}, {ID: "c2"}}},
		{Role: "tool", ToolCallID: "c1", Content: "126"},
		{Role: "tool", ToolCallID: "c2", Content: "{{result \"c1\"}} <b>&"},
		{Role: "assistant", ToolCalls: []loop.ToolCall{{ID: "c1"}}},
		{Role: "tool", ToolCallID: "c1", Content: "latest"},
	}
	tests := []struct{ content, want string }{
		{`plain text, no actions`, `plain text, no actions`},
		{`c1={{result "c1"}}`, `c1=latest`},
		{`c2={{result "c2"}}`, `c2={{result "c1"}} <b>&`},
		{`missing={{result "zz"}}`, `missing=` + scripted.NoResult},
		{"{{- result `c1` -}} !", `latest!`},
		{`literal {{"{{"}}result}}`, `literal {{result}}`},
		{`{{/* a comment */}}x`, `x`},
	}
	for _, tt := range tests {
		t.Run(tt.content, func(t *testing.T) {
			// Turn 3 (two assistant messages precede it) holds the content.
			m := mustParse(t, fmt.Sprintf(`{"turns":[{},{},{"content":%q}]}`, tt.content))
			resp, err := m.Complete(t.Context(), loop.Request{Messages: transcript})
			if err != nil {
				t.Fatal(err)
			}
			if resp.Message.Content != tt.want {
				t.Errorf("content=%q, want %q", resp.Message.Content, tt.want)
			}
		})
	}
}

func TestContentTooLargeIsModelError(t *testing.T) {
	m := mustParse(t, `{"turns":[{},{"content":"`+strings.Repeat(`{{result \"c1\"}}`, 64)+`"}]}`)
	big := strings.Repeat("x", scripted.MaxContentBytes/32)
	msgs := []loop.Message{
		{Role: "assistant", ToolCalls: []loop.ToolCall{{ID: "c1"}}},
		{Role: "tool", ToolCallID: "c1", Content: big},
	}
	_, err := m.Complete(t.Context(), loop.Request{Messages: msgs})
	if err == nil || !strings.Contains(err.Error(), "content") {
		t.Fatalf("err=%v, want a content error", err)
	}
}

func TestCancelledContext(t *testing.T) {
	m := scripted.Demo()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := m.Complete(ctx, loop.Request{}); err == nil {
		t.Fatal("Complete on a cancelled context succeeded")
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name, script, want string
	}{
		{"empty", ``, "empty"},
		{"not JSON", `{"turns":[`, "not valid JSON"},
		{"syntax", `{"turns":[}`, "not valid JSON at byte"},
		{"not an object", `[]`, "want an object"},
		{"no turns", `{}`, "turns: required"},
		{"null turns", `{"turns":null}`, "turns: required"},
		{"unknown top-level field", `{"turns":[],"repeat_last":true}`, `unknown field "repeat_last"`},
		{"unknown turn field", `{"turns":[{"contents":"x"}]}`, `unknown field "contents"`},
		{"unknown call field", `{"turns":[{"tool_calls":[{"name":"x","args":{}}]}]}`, `unknown field "args"`},
		{"trailing data", `{"turns":[]} {}`, "trailing data"},
		{"trailing garbage", `{"turns":[]} x`, "trailing data"},
		{"content not a string", `{"turns":[{"content":1}]}`, "turns.content: got a JSON number, want a string"},
		{"missing name", `{"turns":[{"tool_calls":[{"id":"a"}]}]}`, "turns[0].tool_calls[0].name: required"},
		{"generator without name", `{"turns":[{"calls":{"count":2}}]}`, "turns[0].calls.name: required"},
		{"generator count zero", `{"turns":[{"calls":{"name":"x"}}]}`, "turns[0].calls.count"},
		{"generator count too large", `{"turns":[{"calls":{"name":"x","count":10001}}]}`, "turns[0].calls.count"},
		{"too many calls", `{"turns":[{"tool_calls":[{"name":"x"}],"calls":{"name":"x","count":10000}}]}`, "more than 10000 tool calls"},
		{"bad arguments string", `{"turns":[{"tool_calls":[{"name":"x","arguments":"\u00"}]}]}`, "not valid JSON"},
		{"template syntax", `{"turns":[{},{"content":"{{result \"c1\""}]}`, "turns[1].content"},
		{"template dot", `{"turns":[{"content":"{{.}}"}]}`, "only {{result"},
		{"template field", `{"turns":[{"content":"{{.Secret}}"}]}`, "only {{result"},
		{"template other function", `{"turns":[{"content":"{{printf \"%s\" \"x\"}}"}]}`, "only {{result"},
		{"template pipeline", `{"turns":[{"content":"{{result \"a\" | printf \"%s\"}}"}]}`, "only {{result"},
		{"template variable", `{"turns":[{"content":"{{$x := result \"a\"}}"}]}`, "only {{result"},
		{"template if", `{"turns":[{"content":"{{if true}}x{{end}}"}]}`, "only {{result"},
		{"template range", `{"turns":[{"content":"{{range $i := \"ab\"}}x{{end}}"}]}`, "turns[0].content"},
		{"template define", `{"turns":[{"content":"{{define \"x\"}}y{{end}}z"}]}`, "definitions"},
		{"template include", `{"turns":[{"content":"{{template \"x\"}}"}]}`, "only {{result"},
		{"template unknown function", `{"turns":[{"content":"{{env \"HOME\"}}"}]}`, "not defined"},
		{"result without id", `{"turns":[{"content":"{{result}}"}]}`, "only {{result"},
		{"result with number", `{"turns":[{"content":"{{result 1}}"}]}`, "only {{result"},
		{"too large", `{"turns":[` + strings.Repeat(" ", scripted.MaxScriptBytes) + `]}`, "larger than"},
		{"too many turns", `{"turns":[` + strings.TrimSuffix(strings.Repeat("{},", scripted.MaxTurns+1), ",") + `]}`, "more than 1000 turns"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := scripted.Parse([]byte(tt.script))
			if err == nil {
				t.Fatalf("Parse succeeded: %+v", m)
			}
			if !errors.Is(err, scripted.ErrInvalidScript) {
				t.Errorf("err=%v, want ErrInvalidScript", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err=%q, want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestLoad(t *testing.T) {
	m, err := scripted.Load(filepath.Join("testdata", "example.json"))
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	msgs := []loop.Message{{Role: "user", Content: "go"}}
	var rounds [][]loop.ToolCall
	var final string
	for range 10 {
		resp, err := m.Complete(t.Context(), loop.Request{Messages: msgs})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Message.ToolCalls) == 0 {
			final = resp.Message.Content
			break
		}
		rounds = append(rounds, resp.Message.ToolCalls)
		msgs = answerAll(msgs, resp, func(tc loop.ToolCall) string { return "r:" + tc.ID })
	}
	if len(rounds) != 2 || len(rounds[0]) != 3 || len(rounds[1]) != 3 {
		t.Fatalf("rounds=%+v", rounds)
	}
	if rounds[0][1].Function.Arguments != "{not json" || rounds[0][2].ID != "call_1_3" || rounds[1][2].ID != "e-3" {
		t.Errorf("rounds=%+v", rounds)
	}
	if want := "6 * 7 = r:c1; the echo said r:e-1; c9 gave (no result)."; final != want {
		t.Errorf("final=%q, want %q", final, want)
	}

	t.Run("missing file", func(t *testing.T) {
		_, err := scripted.Load(filepath.Join(t.TempDir(), "nope.json"))
		if !errors.Is(err, os.ErrNotExist) {
			t.Errorf("err=%v, want not-exist", err)
		}
	})
	t.Run("invalid file names the path", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "bad.json")
		if err := os.WriteFile(p, []byte(`{"turns":[{"tool_calls":[{}]}]}`), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := scripted.Load(p)
		if !errors.Is(err, scripted.ErrInvalidScript) || !strings.Contains(err.Error(), "bad.json") || !strings.Contains(err.Error(), "name: required") {
			t.Errorf("err=%v", err)
		}
	})
	t.Run("oversized file", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "big.json")
		if err := os.WriteFile(p, make([]byte, scripted.MaxScriptBytes+10), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := scripted.Load(p); !errors.Is(err, scripted.ErrInvalidScript) {
			t.Errorf("err=%v, want ErrInvalidScript", err)
		}
	})
}

func TestDemo(t *testing.T) {
	m := scripted.Demo()
	results := map[string]string{"(17 + 25) * 3": "126", "2 ** 10": "1024", "126 + 1024": "1150"}
	msgs := []loop.Message{{Role: "system", Content: "sys"}, {Role: "user", Content: "demo"}}
	toolRounds, parallel := 0, false
	for range 10 {
		resp, err := m.Complete(t.Context(), loop.Request{Messages: msgs})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Message.ToolCalls) == 0 {
			want := "(17 + 25) * 3 = 126, 2 ** 10 = 1024, and their sum is 1150."
			if resp.Message.Content != want {
				t.Errorf("final=%q, want %q", resp.Message.Content, want)
			}
			break
		}
		toolRounds++
		parallel = parallel || len(resp.Message.ToolCalls) > 1
		msgs = answerAll(msgs, resp, func(tc loop.ToolCall) string {
			if tc.Function.Name != "calculator" {
				t.Errorf("demo calls %q", tc.Function.Name)
			}
			for expr, r := range results {
				if tc.Function.Arguments == fmt.Sprintf(`{"expression":%q}`, expr) {
					return r
				}
			}
			t.Errorf("unexpected arguments %s", tc.Function.Arguments)
			return ""
		})
	}
	if toolRounds < 2 || !parallel {
		t.Errorf("tool rounds=%d parallel=%v, want >= 2 rounds with a parallel one", toolRounds, parallel)
	}
	if scripted.Demo() == m {
		t.Error("Demo returns a shared model")
	}
}

// TestVariants: a run whose instructions hold a variant's text gets its
// turns; any other run the script's own; a variant without its text or
// turns is refused, naming the field.
func TestVariants(t *testing.T) {
	m, err := scripted.Parse([]byte(`{"turns": [{"content": "plain"}],
		"variants": [{"system_contains": "careful", "turns": [{"content": "careful"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		system, want string
	}{
		{"", "plain"},
		{"be quick", "plain"},
		{"be careful now", "careful"},
	} {
		msgs := []loop.Message{{Role: "user", Content: "go"}}
		if tc.system != "" {
			msgs = append([]loop.Message{{Role: "system", Content: tc.system}}, msgs...)
		}
		resp, err := m.Complete(t.Context(), loop.Request{Messages: msgs})
		if err != nil || resp.Message.Content != tc.want {
			t.Errorf("system %q: %v %+v, want %q", tc.system, err, resp, tc.want)
		}
	}
	for doc, field := range map[string]string{
		`{"turns": [], "variants": [{"turns": []}]}`:                                             "variants[0].system_contains",
		`{"turns": [], "variants": [{"system_contains": "x"}]}`:                                  "variants[0].turns",
		`{"turns": [], "variants": [{"system_contains": "x", "turns": [{"tool_calls": [{}]}]}]}`: "variants[0].turns[0].tool_calls[0].name",
	} {
		var se *scripted.ScriptError
		if _, err := scripted.Parse([]byte(doc)); !errors.As(err, &se) || se.Field != field {
			t.Errorf("%s: %v, want an error naming %s", doc, err, field)
		}
	}
}
