package loop_test

import (
	"strings"
	"testing"

	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/loop/looptest"
)

// A transcript left by a run that crashed mid-round — calls without tool
// messages, others answered out of order — is repaired before the first
// model call: the model sees every call answered, in request order, the
// unanswered ones as outcome unknown, never as cancelled.
func TestRunMessagesAnswersCallsLeftOpen(t *testing.T) {
	model := looptest.NewModel(looptest.Answer("checked"))
	e := newEnv(t, fastConfig(), model, nil, nil)
	in := []loop.Message{
		{Role: "user", Content: "send both"},
		{Role: "assistant", ToolCalls: []loop.ToolCall{looptest.Call("a", "echo", `{"text":"1"}`), looptest.Call("b", "echo", `{"text":"2"}`), looptest.Call("c", "echo", `{"text":"3"}`)}},
		{Role: "tool", ToolCallID: "c", Content: "3"},
		{Role: "user", Content: "and?"},
		{Role: "assistant", ToolCalls: []loop.ToolCall{looptest.Call("d", "echo", `{"text":"4"}`)}},
	}
	res, err := e.runner.RunMessages(t.Context(), in)
	if err != nil {
		t.Fatal(err)
	}
	checkInvariants(t, res)
	reqs := model.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d model calls", len(reqs))
	}
	sent := reqs[0].Messages
	if err := looptest.CheckTranscript(sent); err != nil {
		t.Fatalf("the model got an invalid transcript: %v", err)
	}
	var got []string
	for _, m := range sent {
		if m.Role == "tool" {
			got = append(got, m.ToolCallID)
			if m.ToolCallID != "c" {
				if !strings.Contains(m.Content, "may or may not have taken effect; check before calling it again") || strings.Contains(m.Content, "cancel") {
					t.Fatalf("answer for %s: %q", m.ToolCallID, m.Content)
				}
			}
		}
	}
	if strings.Join(got, ",") != "a,b,c,d" {
		t.Fatalf("tool messages for %v, want a,b,c,d", got)
	}
	if len(in) != 5 || in[2].ToolCallID != "c" {
		t.Fatal("the input was mutated")
	}
	if len(publishedTools(e.disp)) != 0 {
		t.Fatal("a call of the input ran")
	}
}
