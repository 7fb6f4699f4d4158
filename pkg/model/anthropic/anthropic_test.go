package anthropic_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/model/anthropic"
	"github.com/toolfleet/toolfleet/pkg/model/anthropic/anthropictest"
	"github.com/toolfleet/toolfleet/pkg/model/modelhttp"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

func fixture(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func newModel(t *testing.T, srv *anthropictest.Server, cfg anthropic.Config) *anthropic.Model {
	t.Helper()
	cfg.Model, cfg.BaseURL = "claude-test", srv.URL
	if cfg.APIKey == "" {
		cfg.APIKey = srv.APIKey
	}
	if cfg.RetryBaseDelay == 0 {
		cfg.RetryBaseDelay, cfg.MaxRetryDelay = time.Millisecond, time.Second
	}
	m, err := anthropic.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

var calcTool = loop.ToolDef{Name: "get_weather", Description: "weather",
	Parameters: json.RawMessage(`{"type":"object","properties":{"location":{"type":"string"}},"required":["location"],"additionalProperties":false}`)}

// Recorded responses of the real API (from its documentation) map onto the
// loop's response: calls in order with ids and inputs as sent, usage with
// cached input, stop reasons.
func TestRecordedResponses(t *testing.T) {
	tests := []struct {
		file    string
		check   func(t *testing.T, r *loop.Response)
		wantErr error
	}{
		{"message_parallel_tool_use.json", func(t *testing.T, r *loop.Response) {
			if len(r.Message.ToolCalls) != 2 || r.Message.ToolCalls[0].ID != "toolu_01A09q90qw90lq917835lq9" ||
				r.Message.ToolCalls[1].Function.Name != "get_time" || r.Message.ToolCalls[0].Function.Arguments != `{"location": "San Francisco, CA"}` {
				t.Fatalf("calls %+v", r.Message.ToolCalls)
			}
			if r.FinishReason != "tool_calls" || r.Usage.PromptTokens != 572 || r.Usage.CompletionTokens != 91 || !strings.HasPrefix(r.Message.Content, "I'll check") {
				t.Fatalf("response %+v", r)
			}
		}, nil},
		{"message_end_turn.json", func(t *testing.T, r *loop.Response) {
			if r.FinishReason != "stop" || len(r.Message.ToolCalls) != 0 || r.Message.Content != "It is 15 degrees and sunny in San Francisco." {
				t.Fatalf("response %+v", r)
			}
		}, nil},
		{"message_refusal.json", func(t *testing.T, r *loop.Response) {
			if r.FinishReason != "content_filter" {
				t.Fatalf("response %+v", r)
			}
		}, nil},
		{"message_max_tokens_tool_use.json", nil, modelhttp.ErrBadResponse},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			srv := anthropictest.NewServer(t, anthropictest.Sequence(anthropictest.Reply{Body: fixture(t, tt.file)}))
			r, err := newModel(t, srv, anthropic.Config{}).Complete(t.Context(), loop.Request{
				Messages: []loop.Message{{Role: "user", Content: "hi"}}, Tools: []loop.ToolDef{calcTool}})
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, r)
		})
	}
}

// The request carries the transcript as the API wants it: system prompt
// apart, each round's results in one user message in request order, failed
// outcomes as is_error with our observation text, parallel tool use on.
func TestRequestShape(t *testing.T) {
	srv := anthropictest.NewServer(t, nil)
	srv.APIKey = "k"
	_, err := newModel(t, srv, anthropic.Config{}).Complete(t.Context(), loop.Request{
		Messages: []loop.Message{
			{Role: "system", Content: "be brief"},
			{Role: "user", Content: "go"},
			{Role: "assistant", Content: "two calls", ToolCalls: []loop.ToolCall{
				{ID: "a", Type: "function", Function: loop.FunctionCall{Name: "get_weather", Arguments: `{"location":"x"}`}},
				{ID: "b", Type: "function", Function: loop.FunctionCall{Name: "get_weather", Arguments: `{not json`}}}},
			{Role: "tool", ToolCallID: "a", Content: "sunny", Outcome: protocol.OutcomeOK},
			{Role: "tool", ToolCallID: "b", Content: "Error: invalid arguments for 'get_weather'", Outcome: protocol.OutcomeInvalidArguments},
			{Role: "user", Content: "and?"},
		},
		Tools: []loop.ToolDef{calcTool},
	})
	if err != nil {
		t.Fatal(err)
	}
	req := srv.Requests()[0]
	if string(req.System) != `[{"text":"be brief","type":"text"}]` || len(req.Messages) != 3 || req.ToolChoice != nil {
		t.Fatalf("system %s, %d messages, tool_choice %s", req.System, len(req.Messages), req.ToolChoice)
	}
	blocks, _ := req.Messages[2].Blocks()
	if len(blocks) != 3 || blocks[0].ToolUseID != "a" || blocks[1].ToolUseID != "b" || blocks[2].Type != "text" {
		t.Fatalf("results message %+v", blocks)
	}
	if blocks[0].IsError != nil || blocks[1].IsError == nil || !*blocks[1].IsError || blocks[1].ResultText() != "Error: invalid arguments for 'get_weather'" {
		t.Fatalf("is_error/text wrong: %+v %+v", blocks[0], blocks[1])
	}
	uses, _ := req.Messages[1].Blocks()
	if string(uses[2].Input) != `{}` {
		t.Fatalf("invalid arguments sent as input %s, want {}", uses[2].Input)
	}
	if req.Header.Get("X-Api-Key") != "k" || req.Header.Get("Anthropic-Version") == "" {
		t.Fatal("headers")
	}
}

// A tool whose name or schema the API would refuse is left out with a
// warning, and the run goes on with the others.
func TestToolsTheAPIWouldRefuseAreLeftOut(t *testing.T) {
	srv := anthropictest.NewServer(t, nil)
	var logs bytes.Buffer
	m := newModel(t, srv, anthropic.Config{Logger: zerolog.New(&logs)})
	tools := []loop.ToolDef{
		calcTool,
		{Name: "bad.name", Parameters: json.RawMessage(`{"type":"object"}`)},
		{Name: "not_object", Parameters: json.RawMessage(`{"type":"string"}`)},
		{Name: "any_of", Parameters: json.RawMessage(`{"type":"object","anyOf":[{"required":["a"]},{"required":["b"]}]}`)},
	}
	for range 2 {
		if _, err := m.Complete(t.Context(), loop.Request{Messages: []loop.Message{{Role: "user", Content: "hi"}}, Tools: tools}); err != nil {
			t.Fatal(err)
		}
	}
	if got := srv.Requests()[0].Tools; len(got) != 1 || got[0].Name != "get_weather" {
		t.Fatalf("tools sent %+v", got)
	}
	if n := strings.Count(logs.String(), "tool left out"); n != 3 {
		t.Fatalf("%d warnings, want one per tool:\n%s", n, logs.String())
	}
	if len(srv.Rejected()) != 0 {
		t.Fatal(srv.Rejected())
	}
}

// 529 overloaded_error and 429 with Retry-After are retried; 400 is not;
// errors never carry the key or the server's message.
func TestRetriesAndRedaction(t *testing.T) {
	const key = "sk-ant-canary-1234"
	t.Run("overloaded then ok", func(t *testing.T) {
		srv := anthropictest.NewServer(t, anthropictest.Sequence(
			anthropictest.Reply{Status: 529, Body: fixture(t, "error_overloaded.json")},
			anthropictest.Reply{Status: 429, Header: http.Header{"Retry-After": {"0"}}},
			anthropictest.Reply{Content: "ok"}))
		r, err := newModel(t, srv, anthropic.Config{}).Complete(t.Context(), loop.Request{Messages: []loop.Message{{Role: "user", Content: "hi"}}})
		if err != nil || r.Message.Content != "ok" || len(srv.Requests()) != 3 {
			t.Fatalf("r %+v err %v requests %d", r, err, len(srv.Requests()))
		}
	})
	t.Run("retries run out", func(t *testing.T) {
		srv := anthropictest.NewServer(t, anthropictest.Sequence(anthropictest.Reply{Status: 529, Error: "Overloaded " + key}))
		_, err := newModel(t, srv, anthropic.Config{MaxRetries: 2}).Complete(t.Context(), loop.Request{Messages: []loop.Message{{Role: "user", Content: "hi"}}})
		var apiErr *modelhttp.APIError
		if !errors.As(err, &apiErr) || apiErr.StatusCode != 529 || apiErr.Type != "overloaded_error" || len(srv.Requests()) != 3 {
			t.Fatalf("err %v, %d requests", err, len(srv.Requests()))
		}
		if strings.Contains(err.Error(), key) || strings.Contains(err.Error(), srv.URL) {
			t.Fatalf("error leaks: %v", err)
		}
	})
	t.Run("a Retry-After past the maximum delay is not waited for", func(t *testing.T) {
		srv := anthropictest.NewServer(t, anthropictest.Sequence(anthropictest.Reply{Status: 429, Header: http.Header{"Retry-After": {"3600"}}}))
		_, err := newModel(t, srv, anthropic.Config{}).Complete(t.Context(), loop.Request{Messages: []loop.Message{{Role: "user", Content: "hi"}}})
		if err == nil || len(srv.Requests()) != 1 {
			t.Fatalf("err %v, %d requests", err, len(srv.Requests()))
		}
	})
	t.Run("400 is not retried and the key stays out", func(t *testing.T) {
		srv := anthropictest.NewServer(t, nil)
		srv.APIKey = "other"
		_, err := newModel(t, srv, anthropic.Config{APIKey: key}).Complete(t.Context(), loop.Request{Messages: []loop.Message{{Role: "user", Content: "hi"}}})
		if err == nil || strings.Contains(err.Error(), key) || strings.Contains(fmtGo(err), key) || len(srv.Requests()) != 1 {
			t.Fatalf("err %v, %d requests", err, len(srv.Requests()))
		}
	})
	t.Run("a response over the size limit", func(t *testing.T) {
		srv := anthropictest.NewServer(t, anthropictest.Sequence(anthropictest.Reply{Content: strings.Repeat("x", 4096)}))
		_, err := newModel(t, srv, anthropic.Config{MaxResponseBytes: 1024}).Complete(t.Context(), loop.Request{Messages: []loop.Message{{Role: "user", Content: "hi"}}})
		if !errors.Is(err, modelhttp.ErrResponseTooLarge) || len(srv.Requests()) != 1 {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("a dropped connection is retried", func(t *testing.T) {
		srv := anthropictest.NewServer(t, anthropictest.Sequence(anthropictest.Reply{Drop: true}, anthropictest.Reply{Content: "ok"}))
		if _, err := newModel(t, srv, anthropic.Config{}).Complete(t.Context(), loop.Request{Messages: []loop.Message{{Role: "user", Content: "hi"}}}); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("an attempt that hangs times out and is retried", func(t *testing.T) {
		srv := anthropictest.NewServer(t, anthropictest.Sequence(anthropictest.Reply{Hang: true}, anthropictest.Reply{Content: "ok"}))
		if _, err := newModel(t, srv, anthropic.Config{RequestTimeout: 200 * time.Millisecond}).Complete(t.Context(), loop.Request{Messages: []loop.Message{{Role: "user", Content: "hi"}}}); err != nil {
			t.Fatal(err)
		}
	})
}

func fmtGo(err error) string {
	var apiErr *modelhttp.APIError
	if errors.As(err, &apiErr) {
		return apiErr.GoString()
	}
	return ""
}

func TestConfigValidation(t *testing.T) {
	t.Setenv(anthropic.EnvBaseURL, "")
	for _, c := range []anthropic.Config{
		{},
		{Model: "m", BaseURL: "ftp://x"},
		{Model: "m", MaxTokens: -1},
		{Model: "m", MaxRetries: 100},
	} {
		var ve *anthropic.ValidationError
		if _, err := anthropic.New(c); !errors.As(err, &ve) {
			t.Fatalf("New(%+v) = %v", c, err)
		}
	}
	if err := (anthropic.Config{Model: "m"}).Validate(); err != nil {
		t.Fatal(err)
	}
}

// A transcript with tool calls and no tool on offer (the catalog emptied
// mid-run) still makes a request the API takes.
func TestNoToolsLeft(t *testing.T) {
	srv := anthropictest.NewServer(t, nil)
	_, err := newModel(t, srv, anthropic.Config{}).Complete(t.Context(), loop.Request{Messages: []loop.Message{
		{Role: "user", Content: "go"},
		{Role: "assistant", ToolCalls: []loop.ToolCall{{ID: "a", Type: "function", Function: loop.FunctionCall{Name: "gone", Arguments: "{}"}}}},
		{Role: "tool", ToolCallID: "a", Content: "Tool 'gone' timed out after 1s", Outcome: protocol.OutcomeTimeout},
	}})
	if err != nil || len(srv.Rejected()) != 0 {
		t.Fatalf("err %v rejected %q", err, srv.Rejected())
	}
	req := srv.Requests()[0]
	if len(req.Tools) != 1 || req.Tools[0].Name != anthropic.PlaceholderTool || !strings.Contains(string(req.ToolChoice), `"none"`) {
		t.Fatalf("tools %+v tool_choice %s", req.Tools, req.ToolChoice)
	}
}

func TestDisableParallelToolUse(t *testing.T) {
	srv := anthropictest.NewServer(t, nil)
	if _, err := newModel(t, srv, anthropic.Config{DisableParallelToolUse: true}).Complete(t.Context(),
		loop.Request{Messages: []loop.Message{{Role: "user", Content: "go"}}, Tools: []loop.ToolDef{calcTool}}); err != nil {
		t.Fatal(err)
	}
	if tc := string(srv.Requests()[0].ToolChoice); !strings.Contains(tc, `"disable_parallel_tool_use":true`) {
		t.Fatalf("tool_choice %s", tc)
	}
}
