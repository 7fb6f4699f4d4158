package looptest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/loop/looptest"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

func TestCheckTranscript(t *testing.T) {
	call := func(ids ...string) loop.Message {
		m := loop.Message{Role: "assistant"}
		for _, id := range ids {
			m.ToolCalls = append(m.ToolCalls, looptest.Call(id, "echo", "{}"))
		}
		return m
	}
	tool := func(id string) loop.Message { return loop.Message{Role: "tool", ToolCallID: id} }
	user := loop.Message{Role: "user", Content: "hi"}
	tests := []struct {
		name string
		msgs []loop.Message
		ok   bool
	}{
		{"answered in order", []loop.Message{user, call("a", "b"), tool("a"), tool("b"), {Role: "assistant", Content: "done"}}, true},
		{"no tools", []loop.Message{user}, true},
		{"unanswered", []loop.Message{user, call("a", "b"), tool("a")}, false},
		{"answered out of order", []loop.Message{user, call("a", "b"), tool("b"), tool("a")}, false},
		{"answered twice", []loop.Message{user, call("a"), tool("a"), tool("a")}, false},
		{"orphan tool message", []loop.Message{user, tool("a")}, false},
		{"user before the answer", []loop.Message{user, call("a"), user, tool("a")}, false},
		{"empty id", []loop.Message{user, call(""), tool("")}, false},
		{"id reused across messages", []loop.Message{user, call("a"), tool("a"), call("a"), tool("a")}, false},
		{"bad role", []loop.Message{{Role: "robot"}}, false},
		{"tool calls on a user message", []loop.Message{{Role: "user", ToolCalls: call("a").ToolCalls}, tool("a")}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := looptest.CheckTranscript(tt.msgs)
			if (err == nil) != tt.ok {
				t.Fatalf("CheckTranscript=%v, want ok=%v", err, tt.ok)
			}
		})
	}
}

func TestModelRefusesInvalidTranscript(t *testing.T) {
	m := looptest.NewModel(looptest.Answer("x"))
	_, err := m.Complete(t.Context(), loop.Request{Messages: []loop.Message{
		{Role: "user"}, {Role: "assistant", ToolCalls: []loop.ToolCall{looptest.Call("a", "echo", "{}")}},
	}})
	if !errors.Is(err, looptest.ErrInvalidTranscript) {
		t.Fatalf("Complete=%v, want ErrInvalidTranscript", err)
	}
	if n := len(m.Requests()); n != 1 {
		t.Fatalf("%d requests recorded, want 1", n)
	}
	if _, err := looptest.NewModel().Complete(t.Context(), loop.Request{Messages: []loop.Message{{Role: "user"}}}); !errors.Is(err, looptest.ErrScriptExhausted) {
		t.Fatalf("empty script: %v, want ErrScriptExhausted", err)
	}
}

func TestDispatcher(t *testing.T) {
	d := looptest.New(func(ctx context.Context, c protocol.Call) (protocol.Result, bool) {
		if c.Tool == "hang" {
			<-ctx.Done()
			return protocol.Result{}, false
		}
		return looptest.OK("out"), true
	})
	call := protocol.Call{V: 1, RunID: "run1", Round: 1, CallKey: "k1", CallID: "c1", Tool: "echo",
		Arguments: []byte(`{}`), Deadline: time.Now().Add(time.Minute), Attempt: 1}
	if err := d.Publish(t.Context(), loop.Outgoing{Call: call}); err == nil {
		t.Fatal("Publish before Open succeeded")
	}
	bad := call
	bad.Tool = "a.b"
	if err := d.Publish(t.Context(), loop.Outgoing{Call: bad}); err == nil {
		t.Fatal("Publish of an invalid call succeeded")
	}
	ib, err := d.Open(t.Context(), "run1")
	if err != nil {
		t.Fatal(err)
	}
	defer ib.Close()
	if _, err := d.Open(t.Context(), "run1"); err == nil {
		t.Fatal("second Open of a run succeeded")
	}
	if err := d.Publish(t.Context(), loop.Outgoing{Call: call}); err != nil {
		t.Fatal(err)
	}
	ev := <-ib.Events()
	if ev.Result == nil || ev.Result.Output != "out" || ev.Result.CallKey != "k1" || ev.Result.Validate() != nil {
		t.Fatalf("event=%+v, want a valid result for k1", ev)
	}
	hang := call
	hang.CallKey, hang.Tool = "k2", "hang"
	if err := d.Publish(t.Context(), loop.Outgoing{Call: hang}); err != nil {
		t.Fatal(err)
	}
	if err := d.Cancel(t.Context(), protocol.Cancel{V: 1, RunID: "run1", CallKey: "k2"}); err != nil {
		t.Fatal(err)
	}
	d.Wait() // returns only because Cancel ended the hanging handler
	if !d.Inject("run1", loop.Event{Started: &protocol.Started{V: 1, RunID: "run1", CallKey: "k9"}}) {
		t.Fatal("Inject into an open inbox failed")
	}
	if got := <-ib.Events(); got.Started == nil || got.Started.CallKey != "k9" {
		t.Fatalf("injected event=%+v", got)
	}
	ib.Close()
	if d.Inject("run1", loop.Event{}) {
		t.Fatal("Inject into a closed inbox succeeded")
	}
	if len(d.Published()) != 2 || len(d.Cancels()) != 1 || d.Opens() != 1 {
		t.Fatalf("published=%d cancels=%d opens=%d", len(d.Published()), len(d.Cancels()), d.Opens())
	}
}
