package loop_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/loop/looptest"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

func TestApproval(t *testing.T) {
	const approvalTimeout = 40 * time.Millisecond
	tests := []struct {
		name        string
		gate        loop.Gate // nil: no gate
		wantOutcome protocol.Outcome
		wantObs     string
	}{
		{"approved runs", looptest.AllowAll(), protocol.OutcomeOK, "hi"},
		{"denied with reason", looptest.DenyAll("not permitted"), protocol.OutcomeDenied,
			"Tool 'echo' blocked by approval: not permitted"},
		{"denied without reason", looptest.DenyAll(""), protocol.OutcomeDenied, "Tool 'echo' blocked by approval"},
		{"expired decision", &looptest.Gate{Func: func(context.Context, protocol.ApprovalRequest) (loop.Decision, error) {
			return loop.Decision{Expired: true}, nil
		}}, protocol.OutcomeApprovalExpired, "Tool 'echo' blocked by approval: no decision within 40ms"},
		{"approved and expired fails closed", &looptest.Gate{Func: func(context.Context, protocol.ApprovalRequest) (loop.Decision, error) {
			return loop.Decision{Approved: true, Expired: true}, nil
		}}, protocol.OutcomeApprovalExpired, "Tool 'echo' blocked by approval: no decision within 40ms"},
		{"no decision before the deadline", &looptest.Gate{Func: func(ctx context.Context, req protocol.ApprovalRequest) (loop.Decision, error) {
			<-ctx.Done()
			return loop.Decision{}, ctx.Err()
		}}, protocol.OutcomeApprovalExpired, "Tool 'echo' blocked by approval: no decision within 40ms"},
		{"gate ignores its context", &looptest.Gate{Func: func(ctx context.Context, req protocol.ApprovalRequest) (loop.Decision, error) {
			time.Sleep(2 * time.Second) // a broken gate: the loop must not wait for it
			return loop.Decision{Approved: true}, nil
		}}, protocol.OutcomeApprovalExpired, "Tool 'echo' blocked by approval: no decision within 40ms"},
		{"gate error", &looptest.Gate{Func: func(context.Context, protocol.ApprovalRequest) (loop.Decision, error) {
			return loop.Decision{Approved: true}, errors.New("nats: no responders")
		}}, protocol.OutcomeDenied, "Tool 'echo' blocked by approval: approval unavailable (no decision was made)"},
		{"nil gate fails closed", nil, protocol.OutcomeDenied,
			"Tool 'echo' blocked by approval: approval unavailable (no decision was made)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := looptest.NewModel(looptest.Calls(looptest.Call("c1", "echo", `{"text":"hi"}`)), looptest.Answer("ok"))
			cfg := fastConfig()
			cfg.RequireApproval = []string{"echo"}
			cfg.ApprovalTimeout = approvalTimeout
			e := newEnv(t, cfg, m, nil, tt.gate)
			start := time.Now()
			res, err := e.run(t, "go")
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			if time.Since(start) > time.Second {
				t.Fatalf("run took %v: the loop waited past the approval deadline", time.Since(start))
			}
			if got := observation(t, res, 0); res.Calls[0].Outcome != tt.wantOutcome || got != tt.wantObs {
				t.Fatalf("outcome=%q observation=%q, want %q %q", res.Calls[0].Outcome, got, tt.wantOutcome, tt.wantObs)
			}
			ran := len(e.disp.Published()) == 1
			if ran != (tt.wantOutcome == protocol.OutcomeOK) {
				t.Fatalf("published=%v for outcome %q: only approved calls run", ran, tt.wantOutcome)
			}
		})
	}
}

func TestApprovalRequest(t *testing.T) {
	gate := looptest.AllowAll()
	m := looptest.NewModel(looptest.Calls(looptest.Call("c1", "add", `{"b":2, "a":1}`)), looptest.Answer("ok"))
	cfg := fastConfig()
	cfg.RequireApproval = []string{"*"}
	cfg.ApprovalTimeout = time.Minute
	e := newEnv(t, cfg, m, nil, gate)
	res, _ := e.run(t, "go")
	reqs := gate.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d approval requests, want 1", len(reqs))
	}
	r := reqs[0]
	if err := r.Validate(); err != nil {
		t.Fatalf("request invalid: %v", err)
	}
	digest, _ := protocol.Digest(res.RunID, res.Calls[0].CallKey, "add", []byte(`{"a":1,"b":2}`))
	if r.RunID != res.RunID || r.CallKey != res.Calls[0].CallKey || r.CallID != "c1" || r.Round != 1 ||
		r.Tool != "add" || string(r.Arguments) != `{"a":1,"b":2}` || r.Digest != digest {
		t.Fatalf("request=%+v does not bind the call (digest want %s)", r, digest)
	}
	if d := time.Until(r.Deadline); d < 50*time.Second || d > time.Minute {
		t.Fatalf("deadline in %v, want about now+1m", d)
	}
	if pub := e.disp.Published(); len(pub) != 1 || pub[0].CallKey != r.CallKey || string(pub[0].Arguments) != string(r.Arguments) {
		t.Fatalf("published %+v, want the approved call with the approved arguments", pub)
	}
}

func TestApprovalWhichCalls(t *testing.T) {
	needs := looptest.MustSpec("needs", openSchema)
	needs.RequiresApproval = true
	tests := []struct {
		name    string
		require []string
		want    []string // tools asked about, in order
	}{
		{"spec flag only", nil, []string{"needs"}},
		{"listed tool", []string{"echo"}, []string{"echo", "needs"}},
		{"star", []string{"*"}, []string{"echo", "sleep", "needs"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gate := looptest.AllowAll()
			m := looptest.NewModel(looptest.Calls(
				looptest.Call("a", "echo", `{"text":"x"}`),
				looptest.Call("b", "sleep", `{}`),
				looptest.Call("c", "needs", `{}`),
			), looptest.Answer("ok"))
			cfg := fastConfig()
			cfg.RequireApproval = tt.require
			e := newEnv(t, cfg, m, func(ctx context.Context, c protocol.Call) (protocol.Result, bool) {
				return looptest.OK("ran"), true
			}, gate)
			e.cat.Specs = append(e.cat.Specs, needs)
			e.run(t, "go")
			var got []string
			for _, r := range gate.Requests() {
				got = append(got, string(r.Tool))
			}
			if strings.Join(sortStrings(got), ",") != strings.Join(sortStrings(tt.want), ",") {
				t.Fatalf("gate asked about %v, want %v", got, tt.want)
			}
		})
	}
}

func TestApprovalsConcurrent(t *testing.T) {
	// Each approval is held until all three are waiting at once: asked one
	// after another, the first would wait alone and be denied.
	arrived := newBarrier(3)
	gate := &looptest.Gate{Func: func(ctx context.Context, req protocol.ApprovalRequest) (loop.Decision, error) {
		if !arrived.wait(ctx, 10*time.Second) {
			return loop.Decision{Reason: "approvals were asked one at a time"}, nil
		}
		return loop.Decision{Approved: true}, nil
	}}
	m := looptest.NewModel(looptest.Calls(
		looptest.Call("a", "echo", `{"text":"1"}`),
		looptest.Call("b", "echo", `{"text":"2"}`),
		looptest.Call("c", "echo", `{"text":"3"}`),
	), looptest.Answer("ok"))
	cfg := fastConfig()
	cfg.RequireApproval = []string{"echo"}
	cfg.ApprovalTimeout = 20 * time.Second
	e := newEnv(t, cfg, m, nil, gate)
	res, _ := e.run(t, "go")
	if res.Metadata.Outcomes[protocol.OutcomeOK] != 3 {
		t.Fatalf("outcomes=%v, want 3 ok (the three approvals must wait at the same time)", res.Metadata.Outcomes)
	}
}

func TestValidationBeforeApproval(t *testing.T) {
	var asked atomic.Int32
	gate := &looptest.Gate{Func: func(context.Context, protocol.ApprovalRequest) (loop.Decision, error) {
		asked.Add(1)
		return loop.Decision{Approved: true}, nil
	}}
	m := looptest.NewModel(looptest.Calls(
		looptest.Call("a", "add", `{"a":true,"b":2}`),
		looptest.Call("b", "add", `not json`),
		looptest.Call("c", "nope", `{}`),
	), looptest.Answer("ok"))
	cfg := fastConfig()
	cfg.RequireApproval = []string{"*"}
	e := newEnv(t, cfg, m, nil, gate)
	res, _ := e.run(t, "go")
	if n := asked.Load(); n != 0 {
		t.Fatalf("gate asked %d times, want 0: a call that cannot run never reaches a human", n)
	}
	want := []protocol.Outcome{protocol.OutcomeInvalidArguments, protocol.OutcomeInvalidArguments, protocol.OutcomeUnknownTool}
	for i, w := range want {
		if res.Calls[i].Outcome != w {
			t.Fatalf("call %d outcome=%q, want %q", i, res.Calls[i].Outcome, w)
		}
	}
}

// TestCancelDuringApproval: the run's context ends while a human is being
// asked; the run ends cancelled, the call never runs and is answered.
func TestCancelDuringApproval(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	gate := &looptest.Gate{Func: func(gctx context.Context, req protocol.ApprovalRequest) (loop.Decision, error) {
		cancel()
		<-gctx.Done()
		return loop.Decision{}, gctx.Err()
	}}
	m := looptest.NewModel(looptest.Calls(looptest.Call("c1", "echo", `{"text":"x"}`)), looptest.Answer("never"))
	cfg := fastConfig()
	cfg.RequireApproval = []string{"*"}
	e := newEnv(t, cfg, m, nil, gate)
	res, err := e.runner.Run(ctx, "go")
	if err != nil || res == nil {
		t.Fatalf("Run: res=%v err=%v", res, err)
	}
	checkInvariants(t, res)
	if res.TerminationReason != loop.TerminationCancelled || res.Calls[0].Outcome != protocol.OutcomeCancelled {
		t.Fatalf("reason=%q outcome=%q, want cancelled", res.TerminationReason, res.Calls[0].Outcome)
	}
	if n := len(e.disp.Published()); n != 0 {
		t.Fatalf("%d calls published, want none", n)
	}
}
