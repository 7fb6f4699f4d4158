package loop_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/loop/looptest"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// TestDroppedEvents injects, before the real result of a call, an event
// that must not answer it; the call keeps its real answer and the event is
// logged as dropped with the named reason.
func TestDroppedEvents(t *testing.T) {
	tests := []struct {
		name   string
		forge  func(c protocol.Call) loop.Event
		reason string
	}{
		{"unknown call key", func(c protocol.Call) loop.Event {
			return loop.Event{Result: &protocol.Result{V: 1, RunID: c.RunID, CallKey: "nosuchkey", Outcome: protocol.OutcomeOK, Output: "forged"}}
		}, "unknown_call_key"},
		{"other run", func(c protocol.Call) loop.Event {
			return loop.Event{Result: &protocol.Result{V: 1, RunID: "otherrun", CallKey: c.CallKey, Outcome: protocol.OutcomeOK, Output: "forged"}}
		}, "other_run"},
		{"coordinator-only outcome", func(c protocol.Call) loop.Event {
			return loop.Event{Result: &protocol.Result{V: 1, RunID: c.RunID, CallKey: c.CallKey, Outcome: protocol.OutcomeApprovalExpired}}
		}, "invalid_outcome"},
		{"unknown outcome", func(c protocol.Call) loop.Event {
			return loop.Event{Result: &protocol.Result{V: 1, RunID: c.RunID, CallKey: c.CallKey, Outcome: "maybe"}}
		}, "invalid_message"},
		{"wrong version", func(c protocol.Call) loop.Event {
			return loop.Event{Result: &protocol.Result{V: 2, RunID: c.RunID, CallKey: c.CallKey, Outcome: protocol.OutcomeOK}}
		}, "invalid_message"},
		{"empty event", func(c protocol.Call) loop.Event { return loop.Event{} }, "malformed_event"},
		{"progress of another run", func(c protocol.Call) loop.Event {
			return loop.Event{Started: &protocol.Started{V: 1, RunID: "otherrun", CallKey: c.CallKey}}
		}, "other_run"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := looptest.NewModel(looptest.Calls(looptest.Call("c1", "echo", `{"text":"real"}`)), looptest.Answer("ok"))
			var d *looptest.Dispatcher
			h := func(ctx context.Context, c protocol.Call) (protocol.Result, bool) {
				if !d.Inject(c.RunID, tt.forge(c)) {
					t.Error("Inject: no inbox")
				}
				return looptest.OK("real"), true
			}
			e := newEnv(t, fastConfig(), m, h, nil)
			d = e.disp
			res, err := e.run(t, "go")
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			if got := observation(t, res, 0); got != "real" || res.Calls[0].Outcome != protocol.OutcomeOK {
				t.Fatalf("observation=%q outcome=%q, want the real result", got, res.Calls[0].Outcome)
			}
			drops := e.logs.lines(t, "event_dropped")
			if len(drops) != 1 || drops[0]["drop_reason"] != tt.reason {
				t.Fatalf("dropped lines=%v, want one with reason %q", drops, tt.reason)
			}
		})
	}
}

func TestDuplicateResultDropped(t *testing.T) {
	// The echo call is answered twice; a sibling sleep call keeps the round
	// gathering long enough for the second answer to be read and dropped.
	m := looptest.NewModel(
		looptest.Calls(looptest.Call("c1", "echo", `{"text":"x"}`), looptest.Call("c2", "sleep", `{}`)),
		looptest.Answer("ok"),
	)
	var d *looptest.Dispatcher
	e := newEnv(t, fastConfig(), m, func(ctx context.Context, c protocol.Call) (protocol.Result, bool) {
		if c.Tool != "echo" {
			return handler(ctx, c)
		}
		first := protocol.Result{V: 1, RunID: c.RunID, CallKey: c.CallKey, Outcome: protocol.OutcomeOK, Output: "first"}
		second := first
		second.Output = "second"
		d.Inject(c.RunID, loop.Event{Result: &first})
		d.Inject(c.RunID, loop.Event{Result: &second})
		return protocol.Result{}, false
	}, nil)
	d = e.disp
	res, _ := e.run(t, "go")
	if got := observation(t, res, 0); got != "first" {
		t.Fatalf("observation=%q, want the first result only", got)
	}
	drops := e.logs.lines(t, "event_dropped")
	if len(drops) != 1 || drops[0]["drop_reason"] != "duplicate" {
		t.Fatalf("dropped lines=%v, want one duplicate", drops)
	}
}

// TestLateResultDropped: a result that arrives after its call timed out
// (here, during the next round) is dropped; the timeout stands.
func TestLateResultDropped(t *testing.T) {
	m := looptest.NewModel(
		looptest.Calls(looptest.Call("c1", "hang", `{}`)),
		looptest.Calls(looptest.Call("c2", "echo", `{"text":"now"}`)),
		looptest.Answer("ok"),
	)
	var d *looptest.Dispatcher
	hungCh := make(chan protocol.Call, 1)
	var hung protocol.Call
	h := func(ctx context.Context, c protocol.Call) (protocol.Result, bool) {
		if c.Tool == "hang" {
			hungCh <- c
			return protocol.Result{}, false
		}
		hung = <-hungCh
		late := protocol.Result{V: 1, RunID: hung.RunID, CallKey: hung.CallKey, Outcome: protocol.OutcomeOK, Output: "late"}
		d.Inject(c.RunID, loop.Event{Result: &late})
		return looptest.OK("now"), true
	}
	cfg := fastConfig()
	cfg.ToolTimeout = 30 * time.Millisecond
	e := newEnv(t, cfg, m, h, nil)
	d = e.disp
	res, _ := e.run(t, "go")
	if res.Calls[0].Outcome != protocol.OutcomeTimeout || observation(t, res, 0) != "Tool 'hang' timed out after 30ms" {
		t.Fatalf("first call %q %q, want the timeout to stand", res.Calls[0].Outcome, observation(t, res, 0))
	}
	if observation(t, res, 1) != "now" {
		t.Fatalf("second call %q, want now", observation(t, res, 1))
	}
	drops := e.logs.lines(t, "event_dropped")
	if len(drops) != 1 || drops[0]["drop_reason"] != "late" || drops[0]["call_key"] != string(hung.CallKey) {
		t.Fatalf("dropped lines=%v, want one late result for %s", drops, hung.CallKey)
	}
}

func TestProgressThenSilence(t *testing.T) {
	tests := []struct {
		name       string
		idempotent bool
		progress   bool
		want       protocol.Outcome
		wantObs    string
	}{
		{"non-idempotent started", false, true, protocol.OutcomeUnknown,
			"Tool 'pay' outcome unknown: a worker started this call and stopped answering, so it may or may not have taken effect. Check before calling it again."},
		{"idempotent started", true, true, protocol.OutcomeTimeout, "Tool 'pay' timed out after 30ms"},
		{"never started", false, false, protocol.OutcomeTimeout, "Tool 'pay' timed out after 30ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pay := looptest.MustSpec("pay", openSchema)
			pay.Idempotent = tt.idempotent
			m := looptest.NewModel(looptest.Calls(looptest.Call("c1", "pay", `{}`)), looptest.Answer("ok"))
			cfg := fastConfig()
			cfg.ToolTimeout = 30 * time.Millisecond
			e := newEnv(t, cfg, m, func(ctx context.Context, c protocol.Call) (protocol.Result, bool) {
				return protocol.Result{}, false
			}, nil)
			e.disp.Started = tt.progress
			e.cat.Specs = append(e.cat.Specs, pay)
			res, _ := e.run(t, "go")
			if res.Calls[0].Outcome != tt.want || observation(t, res, 0) != tt.wantObs {
				t.Fatalf("outcome=%q observation=%q, want %q %q", res.Calls[0].Outcome, observation(t, res, 0), tt.want, tt.wantObs)
			}
			if tt.progress && res.Calls[0].Worker != "looptest" {
				t.Fatalf("worker=%q, want the one that said it started", res.Calls[0].Worker)
			}
			if c := e.disp.Cancels(); len(c) != 1 || c[0].CallKey != res.Calls[0].CallKey {
				t.Fatalf("cancels=%+v, want one for the silent call", c)
			}
		})
	}
}

// TestWithdrawAtTheDeadline: with an inbox that can withdraw calls, a
// non-idempotent call unanswered at its deadline is taken back. One no
// worker claimed never runs and is answered timeout at once, long before
// its grace ends; one a worker claimed, or one the fleet cannot tell
// about, is outcome_unknown after the grace. Idempotent calls and calls a
// worker said it started are never asked about.
func TestWithdrawAtTheDeadline(t *testing.T) {
	const (
		withdrawnObs = "Tool 'pay' timed out after 30ms before any worker started it: it did not run"
		unknownObs   = "Tool 'pay' outcome unknown: a worker started this call and stopped answering, so it may or may not have taken effect. Check before calling it again."
	)
	tests := []struct {
		name        string
		idempotent  bool
		held        bool  // queued, never claimed
		started     bool  // the worker sends a started notice
		withdrawErr error // the fleet cannot tell
		grace       time.Duration
		want        protocol.Outcome
		wantObs     string
		asked       bool
		withdrawn   bool
		cancelled   bool
	}{
		// An hour of grace: only the withdrawal can end this run in time.
		{name: "queued: withdrawn, never runs", held: true, grace: time.Hour,
			want: protocol.OutcomeTimeout, wantObs: withdrawnObs, asked: true, withdrawn: true},
		{name: "claimed, then silent", grace: 20 * time.Millisecond,
			want: protocol.OutcomeUnknown, wantObs: unknownObs, asked: true, cancelled: true},
		{name: "the fleet cannot tell", held: true, withdrawErr: errors.New("no responders"), grace: 20 * time.Millisecond,
			want: protocol.OutcomeUnknown, wantObs: unknownObs, asked: true, cancelled: true},
		{name: "idempotent: not asked", idempotent: true, held: true, grace: 20 * time.Millisecond,
			want: protocol.OutcomeTimeout, wantObs: "Tool 'pay' timed out after 30ms", cancelled: true},
		{name: "said it started: not asked", started: true, grace: 20 * time.Millisecond,
			want: protocol.OutcomeUnknown, wantObs: unknownObs, cancelled: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pay := looptest.MustSpec("pay", openSchema)
			pay.Idempotent = tt.idempotent
			m := looptest.NewModel(looptest.Calls(looptest.Call("c1", "pay", `{}`)), looptest.Answer("ok"))
			cfg := fastConfig()
			cfg.ToolTimeout = 30 * time.Millisecond
			cfg.Grace = tt.grace
			ran := make(chan struct{}, 1)
			e := newEnv(t, cfg, m, func(ctx context.Context, c protocol.Call) (protocol.Result, bool) {
				ran <- struct{}{}
				return protocol.Result{}, false
			}, nil)
			e.disp.Withdrawals, e.disp.WithdrawErr, e.disp.Started = true, tt.withdrawErr, tt.started
			e.disp.Hold = func(protocol.Call) bool { return tt.held }
			e.cat.Specs = append(e.cat.Specs, pay)
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			res, err := e.runner.Run(ctx, "go")
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			checkInvariants(t, res)
			key := res.Calls[0].CallKey
			if res.Calls[0].Outcome != tt.want || observation(t, res, 0) != tt.wantObs {
				t.Fatalf("outcome=%q observation=%q, want %q %q", res.Calls[0].Outcome, observation(t, res, 0), tt.want, tt.wantObs)
			}
			if asked := e.disp.Asked(); tt.asked != (len(asked) == 1 && asked[0] == key) || len(asked) > 1 {
				t.Fatalf("withdrawals asked %v, want asked=%v for %s", asked, tt.asked, key)
			}
			if w := e.disp.Withdrawn(); tt.withdrawn != (len(w) == 1) {
				t.Fatalf("withdrawn %v, want withdrawn=%v", w, tt.withdrawn)
			}
			if tt.held && len(ran) != 0 {
				t.Fatal("a held call's handler ran")
			}
			if c := e.disp.Cancels(); tt.cancelled != (len(c) == 1) {
				t.Fatalf("cancels=%+v, want cancelled=%v", c, tt.cancelled)
			}
		})
	}
}

func TestWorkerReportedOutcomes(t *testing.T) {
	tests := []struct {
		res     protocol.Result
		want    string
		outcome protocol.Outcome
	}{
		{protocol.Result{Outcome: protocol.OutcomeFailed, ErrorType: "exit status 2"}, "Tool 'echo' failed: exit status 2", protocol.OutcomeFailed},
		{protocol.Result{Outcome: protocol.OutcomeFailed}, "Tool 'echo' failed: error", protocol.OutcomeFailed},
		{protocol.Result{Outcome: protocol.OutcomeFailed, ErrorType: "bad\ntype\x00"}, "Tool 'echo' failed: bad?type?", protocol.OutcomeFailed},
		{protocol.Result{Outcome: protocol.OutcomeInvalidArguments, Output: "at '/x': nope"}, "Tool 'echo' argument error: at '/x': nope", protocol.OutcomeInvalidArguments},
		{protocol.Result{Outcome: protocol.OutcomeUnknownTool}, "Error: Unknown tool 'echo'", protocol.OutcomeUnknownTool},
		{protocol.Result{Outcome: protocol.OutcomeTimeout}, "Tool 'echo' timed out after 2m", protocol.OutcomeTimeout},
		{protocol.Result{Outcome: protocol.OutcomeCancelled}, "Tool 'echo' was cancelled", protocol.OutcomeCancelled},
	}
	for _, tt := range tests {
		t.Run(string(tt.outcome), func(t *testing.T) {
			m := looptest.NewModel(looptest.Calls(looptest.Call("c1", "echo", `{"text":"x"}`)), looptest.Answer("ok"))
			cfg := fastConfig()
			cfg.ToolTimeout = 2 * time.Minute
			e := newEnv(t, cfg, m, func(ctx context.Context, c protocol.Call) (protocol.Result, bool) { return tt.res, true }, nil)
			res, _ := e.run(t, "go")
			if got := observation(t, res, 0); got != tt.want || res.Calls[0].Outcome != tt.outcome {
				t.Fatalf("observation=%q outcome=%q, want %q %q", got, res.Calls[0].Outcome, tt.want, tt.outcome)
			}
		})
	}
}
