package loop_test

import (
	"context"
	"errors"
	"maps"
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/loop/looptest"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

func TestObserverSeesCallsRunsAndModelCalls(t *testing.T) {
	obs := looptest.NewObserver()
	cfg := fastConfig()
	cfg.MaxToolCallsPerRound = 5
	cfg.Observer = obs
	m := looptest.NewModel(
		looptest.Turn{Usage: loop.Usage{PromptTokens: 10, CompletionTokens: 3}, Calls: []loop.ToolCall{
			looptest.Call("a", "echo", `{"text":"hi"}`),
			looptest.Call("b", "add", `{"a":"x"}`),
			looptest.Call("c", "no-such-tool-0123", `{}`),
			looptest.Call("d", "fail", `{}`),
			looptest.Call("a", "echo", `{"text":"again"}`), // repeats a: rejected
			looptest.Call("e", "echo", `{"text":"over the cap"}`),
			looptest.Call("f", "bad name!", `{}`),
		}},
		looptest.Turn{Content: "done", Usage: loop.Usage{PromptTokens: 20, CompletionTokens: 5}},
	)
	e := newEnv(t, cfg, m, nil, nil)
	if _, err := e.run(t, "go"); err != nil {
		t.Fatal(err)
	}
	want := map[string]int{
		looptest.CallLabel("echo", protocol.OutcomeOK):              1,
		looptest.CallLabel("add", protocol.OutcomeInvalidArguments): 1,
		looptest.CallLabel("", protocol.OutcomeUnknownTool):         1, // the model's name is never passed
		looptest.CallLabel("fail", protocol.OutcomeFailed):          1,
		looptest.CallLabel("echo", protocol.OutcomeRejected):        2, // the repeat and the call over the cap
		looptest.CallLabel("", protocol.OutcomeRejected):            1, // over the cap, not a catalog name
	}
	if got := obs.Calls(); !maps.Equal(got, want) {
		t.Fatalf("calls = %v, want %v", got, want)
	}
	if got := obs.Runs(); !maps.Equal(got, map[loop.TerminationReason]int{loop.TerminationNatural: 1}) || obs.RunsStarted() != 1 {
		t.Fatalf("runs = %v (started %d), want one natural", got, obs.RunsStarted())
	}
	calls, errs, pt, ct := obs.ModelCalls()
	if calls != 2 || errs != 0 || pt != 30 || ct != 8 {
		t.Fatalf("model calls=%d errors=%d tokens=%d/%d, want 2 0 30/8", calls, errs, pt, ct)
	}
	if len(obs.Approvals()) != 0 {
		t.Fatalf("approvals = %v, want none: nothing needed approval", obs.Approvals())
	}
}

func TestObserverSeesEveryTermination(t *testing.T) {
	tests := []struct {
		name   string
		turns  []looptest.Turn
		cfg    func(*loop.Config)
		cancel bool
		want   loop.TerminationReason
		errs   int
	}{
		{name: "model error", turns: []looptest.Turn{{Err: errors.New("boom")}}, want: loop.TerminationError, errs: 1},
		{name: "max rounds", turns: []looptest.Turn{
			looptest.Calls(looptest.Call("a", "echo", `{"text":"1"}`)),
		}, cfg: func(c *loop.Config) { c.MaxRounds = 1 }, want: loop.TerminationMaxRounds},
		{name: "cancelled", turns: []looptest.Turn{looptest.Answer("never")}, cancel: true, want: loop.TerminationCancelled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obs := looptest.NewObserver()
			cfg := fastConfig()
			cfg.Observer = obs
			if tt.cfg != nil {
				tt.cfg(&cfg)
			}
			e := newEnv(t, cfg, looptest.NewModel(tt.turns...), nil, nil)
			ctx := t.Context()
			if tt.cancel {
				c, cancel := context.WithCancel(ctx)
				cancel()
				ctx = c
			}
			if res, _ := e.runner.Run(ctx, "go"); res == nil {
				t.Fatal("nil result")
			}
			if got := obs.Runs(); !maps.Equal(got, map[loop.TerminationReason]int{tt.want: 1}) {
				t.Fatalf("runs = %v, want one %s", got, tt.want)
			}
			if _, errs, _, _ := obs.ModelCalls(); errs != tt.errs {
				t.Fatalf("model errors = %d, want %d", errs, tt.errs)
			}
		})
	}
}

func TestObserverSeesApprovals(t *testing.T) {
	tests := []struct {
		name string
		gate loop.Gate
		want loop.ApprovalResult
	}{
		{"approved", looptest.AllowAll(), loop.ApprovalApproved},
		{"denied", looptest.DenyAll("no"), loop.ApprovalDenied},
		{"expired", &looptest.Gate{Func: func(ctx context.Context, _ protocol.ApprovalRequest) (loop.Decision, error) {
			<-ctx.Done()
			return loop.Decision{}, ctx.Err()
		}}, loop.ApprovalExpired},
		{"gate error", &looptest.Gate{Func: func(context.Context, protocol.ApprovalRequest) (loop.Decision, error) {
			return loop.Decision{}, errors.New("unreachable")
		}}, loop.ApprovalUnavailable},
		{"no gate", nil, loop.ApprovalUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obs := looptest.NewObserver()
			cfg := fastConfig()
			cfg.Observer = obs
			cfg.RequireApproval = []string{"echo"}
			cfg.ApprovalTimeout = 30 * time.Millisecond
			m := looptest.NewModel(looptest.Calls(
				looptest.Call("a", "echo", `{"text":"hi"}`),
				looptest.Call("b", "echo", `{"bad":1}`), // invalid: never asked about
				looptest.Call("c", "add", `{"a":1,"b":2}`),
			), looptest.Answer("ok"))
			e := newEnv(t, cfg, m, nil, tt.gate)
			if _, err := e.run(t, "go"); err != nil {
				t.Fatal(err)
			}
			if got := obs.Approvals(); !maps.Equal(got, map[loop.ApprovalResult]int{tt.want: 1}) {
				t.Fatalf("approvals = %v, want one %s", got, tt.want)
			}
		})
	}
}

// runCounter observes only run ends; NopObserver supplies the rest.
type runCounter struct {
	loop.NopObserver
	ended chan loop.TerminationReason
}

func (r *runCounter) RunEnded(reason loop.TerminationReason) { r.ended <- reason }

// TestPartialObserver checks that an Observer embedding NopObserver works
// with the loop and sees what it implements.
func TestPartialObserver(t *testing.T) {
	o := &runCounter{ended: make(chan loop.TerminationReason, 1)}
	cfg := fastConfig()
	cfg.Observer = o
	m := looptest.NewModel(looptest.Calls(looptest.Call("a", "echo", `{"text":"1"}`)), looptest.Answer("hi"))
	e := newEnv(t, cfg, m, nil, nil)
	if _, err := e.run(t, "go"); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-o.ended:
		if got != loop.TerminationNatural {
			t.Fatalf("RunEnded(%q), want natural", got)
		}
	default:
		t.Fatal("RunEnded was not called")
	}
}

func TestObserversTellsEach(t *testing.T) {
	if loop.Observers() != nil || loop.Observers(nil, nil) != nil {
		t.Fatal("Observers of nothing is not nil")
	}
	one := looptest.NewObserver()
	if loop.Observers(nil, one) != loop.Observer(one) {
		t.Fatal("Observers of one observer does not return it")
	}
	a, b := looptest.NewObserver(), looptest.NewObserver()
	cfg := fastConfig()
	cfg.Observer = loop.Observers(a, nil, b)
	m := looptest.NewModel(looptest.Calls(looptest.Call("x", "echo", `{"text":"1"}`)), looptest.Answer("hi"))
	e := newEnv(t, cfg, m, nil, nil)
	if _, err := e.run(t, "go"); err != nil {
		t.Fatal(err)
	}
	for i, o := range []*looptest.Observer{a, b} {
		calls, _, _, _ := o.ModelCalls()
		if o.RunsStarted() != 1 || o.Runs()[loop.TerminationNatural] != 1 || calls != 2 ||
			o.Calls()[looptest.CallLabel("echo", protocol.OutcomeOK)] != 1 {
			t.Fatalf("observer %d saw runs=%v calls=%v model calls=%d", i, o.Runs(), o.Calls(), calls)
		}
	}
}
