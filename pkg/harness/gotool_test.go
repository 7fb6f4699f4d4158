package harness_test

import (
	"context"
	"encoding/json"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/internal/testsync"
	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// goroutineID is the calling goroutine's number, from its stack's header
// ("goroutine 42 [running]:").
func goroutineID() string {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	id, _, _ := strings.Cut(strings.TrimPrefix(string(buf), "goroutine "), " ")
	return id
}

// TestGoToolGoroutineReuse: calls of Go tools made one after the other run
// on one goroutine, kept for them; a call made while that goroutine is
// busy does not wait for it; a goroutine whose tool panicked, called
// runtime.Goexit or was abandoned runs no later call; and a tool that
// keeps its context sees it end with its call, not carry the next call's.
func TestGoToolGoroutineReuse(t *testing.T) {
	ran := make(chan string, 1) // the goroutine of the last panic, goexit or hang
	release := make(chan struct{})
	var kept context.Context
	tools := []harness.Tool{
		{Name: "where", Run: func(context.Context, json.RawMessage) (string, error) { return goroutineID(), nil }},
		{Name: "keep", Run: func(ctx context.Context, _ json.RawMessage) (string, error) {
			kept = ctx
			return harness.CallKeyFrom(ctx) + " " + goroutineID(), nil
		}},
		{Name: "boom", Run: func(context.Context, json.RawMessage) (string, error) {
			ran <- goroutineID()
			panic("boom")
		}},
		{Name: "exit", Run: func(context.Context, json.RawMessage) (string, error) {
			ran <- goroutineID()
			runtime.Goexit()
			return "", nil
		}},
		{Name: "hang-where", Run: func(context.Context, json.RawMessage) (string, error) {
			ran <- goroutineID()
			<-release // ignores its context
			return "", nil
		}},
	}
	h, _ := newHarness(t, harness.Config{}, tools...)
	call := func(tool string, key protocol.CallKey) harness.Result {
		t.Helper()
		return h.Execute(t.Context(), harness.Call{Tool: protocol.ToolName(tool), Arguments: json.RawMessage(`{}`),
			CallKey: key, Deadline: time.Now().Add(time.Minute)})
	}
	where := func() string {
		t.Helper()
		r := call("where", "")
		if r.Outcome != protocol.OutcomeOK {
			t.Fatalf("where: %+v", r)
		}
		return r.Output
	}

	first := where()
	if again := where(); again != first {
		t.Fatalf("the second of two calls one after the other ran on goroutine %s, the first on %s", again, first)
	}

	r1 := call("keep", "key-1")
	r2 := call("keep", "key-2")
	if r1.Output != "key-1 "+first || r2.Output != "key-2 "+first {
		t.Fatalf("keep answered %q then %q, want key-1 then key-2 on goroutine %s", r1.Output, r2.Output, first)
	}
	if kept.Err() == nil || harness.CallKeyFrom(kept) != "key-2" {
		t.Fatalf("a finished call's context: Err %v, key %q; want ended, key-2", kept.Err(), harness.CallKeyFrom(kept))
	}

	// A call made while the kept goroutine runs a call gets another.
	busy := make(chan harness.Result, 1)
	started, releaseBusy := make(chan struct{}, 1), make(chan struct{})
	h2, _ := newHarness(t, harness.Config{}, hangTool("hang", started, releaseBusy),
		harness.Tool{Name: "where", Run: tools[0].Run})
	busyOn := h2.Execute(t.Context(), harness.Call{Tool: "where", Arguments: json.RawMessage(`{}`)}).Output
	go func() {
		busy <- h2.Execute(t.Context(), harness.Call{Tool: "hang", Arguments: json.RawMessage(`{}`), Deadline: time.Now().Add(time.Minute)})
	}()
	<-started
	if r := h2.Execute(t.Context(), harness.Call{Tool: "where", Arguments: json.RawMessage(`{}`)}); r.Outcome != protocol.OutcomeOK || r.Output == busyOn {
		t.Fatalf("a call beside a running one: %+v, want ok on a goroutine other than %s", r, busyOn)
	}

	for _, tc := range []struct {
		tool     string
		deadline time.Duration
		want     protocol.Outcome
	}{
		{"boom", time.Minute, protocol.OutcomeFailed},
		{"exit", time.Minute, protocol.OutcomeFailed},
		{"hang-where", 50 * time.Millisecond, protocol.OutcomeTimeout},
	} {
		where() // a kept goroutine is idle
		r := h.Execute(t.Context(), harness.Call{Tool: protocol.ToolName(tc.tool), Arguments: json.RawMessage(`{}`),
			Deadline: time.Now().Add(tc.deadline)})
		if r.Outcome != tc.want {
			t.Fatalf("%s: %+v, want %s", tc.tool, r, tc.want)
		}
		on := <-ran
		if tc.tool == "hang-where" {
			release <- struct{}{}
			testsync.WaitUntil(t, 5*time.Second, "the abandoned tool to return", func() bool { return h.Abandoned() == 0 })
		}
		if next := where(); next == on {
			t.Fatalf("after %s on goroutine %s, the next call ran on it too", tc.tool, on)
		}
	}
	close(releaseBusy)
	if r := <-busy; r.Outcome != protocol.OutcomeOK {
		t.Fatalf("hang: %+v", r)
	}
}

// TestGoToolGoroutineExitsWhenIdle: a goroutine kept for Go tools' calls
// exits once it has had none for its idle time.
func TestGoToolGoroutineExitsWhenIdle(t *testing.T) {
	h, _ := newHarness(t, harness.Config{}, harness.Tool{Name: "where",
		Run: func(context.Context, json.RawMessage) (string, error) { return goroutineID(), nil }})
	harness.SetRunnerIdle(h, 10*time.Millisecond)
	r := h.Execute(t.Context(), harness.Call{Tool: "where", Arguments: json.RawMessage(`{}`)})
	if r.Outcome != protocol.OutcomeOK {
		t.Fatalf("where: %+v", r)
	}
	if !goroutineExists(r.Output) {
		t.Fatalf("goroutine %s, kept for the next call, is not among the process's", r.Output)
	}
	testsync.WaitUntil(t, 10*time.Second, "the idle goroutine to exit", func() bool { return !goroutineExists(r.Output) })
}

// goroutineExists reports whether the goroutine numbered id is alive.
func goroutineExists(id string) bool {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	return strings.Contains(string(buf), "goroutine "+id+" [")
}
