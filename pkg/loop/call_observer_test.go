package loop_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/loop/looptest"
)

type callLog struct {
	loop.NopObserver
	mu     sync.Mutex
	phases map[string][]string
}

func (c *callLog) CallEvent(ev loop.CallEvent) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := string(ev.Phase)
	if ev.Phase == loop.CallDone {
		s += ":" + string(ev.Outcome)
	}
	if ev.Phase == loop.CallStartedPhase {
		s += ":" + ev.Worker
	}
	c.phases[ev.CallID] = append(c.phases[ev.CallID], s)
}

// TestCallObserverFollowsEachCall shows the phases of each call, approval
// and rejected ones included, reach a CallObserver through Observers.
func TestCallObserverFollowsEachCall(t *testing.T) {
	log := &callLog{phases: map[string][]string{}}
	cfg := fastConfig()
	cfg.MaxToolCallsPerRound = 3
	cfg.RequireApproval = []string{"add"}
	cfg.Observer = loop.Observers(looptest.NewObserver(), log)
	m := looptest.NewModel(
		looptest.Calls(
			looptest.Call("a", "echo", `{"text":"hi"}`),
			looptest.Call("b", "add", `{"a":1,"b":2}`),
			looptest.Call("c", "no-such-tool", `{}`),
			looptest.Call("d", "echo", `{"text":"over the cap"}`),
		),
		looptest.Answer("done"),
	)
	e := newEnv(t, cfg, m, nil, looptest.AllowAll())
	e.disp.Started = true
	if _, err := e.run(t, "go"); err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprint(log.phases)
	for id, want := range map[string]string{
		"a": "queued started:looptest done:ok",
		"b": "awaiting_approval queued started:looptest done:ok",
		"c": "done:unknown_tool",
		"d": "done:rejected",
	} {
		if strings.Join(log.phases[id], " ") != want {
			t.Errorf("call %s: %q, want %q (all: %s)", id, strings.Join(log.phases[id], " "), want, got)
		}
	}
}

// TestCallStartedFromTheResult: a run that asks for started notices
// hears of a call's start even when the worker's notice never comes
// before its result (the two travel apart): the result, from the worker
// that ran the call, says so once, before the call is done; a run that
// asked for none hears of no start.
func TestCallStartedFromTheResult(t *testing.T) {
	for _, c := range []struct {
		name    string
		notices bool
		want    string
	}{
		{"notices asked", true, "queued started:looptest done:ok"},
		{"no notices asked", false, "queued done:ok"},
	} {
		t.Run(c.name, func(t *testing.T) {
			log := &callLog{phases: map[string][]string{}}
			cfg := fastConfig()
			cfg.Observer = loop.Observers(looptest.NewObserver(), log)
			m := looptest.NewModel(looptest.Calls(looptest.Call("a", "echo", `{"text":"hi"}`)), looptest.Answer("done"))
			e := newEnv(t, cfg, m, nil, looptest.AllowAll())
			e.disp.Started = false // the notice never comes first
			ctx := t.Context()
			if c.notices {
				ctx = loop.WithStartedNotices(ctx)
			}
			if _, err := e.runner.Run(ctx, "go"); err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(log.phases["a"], " "); got != c.want {
				t.Errorf("call a: %q, want %q", got, c.want)
			}
		})
	}
}
