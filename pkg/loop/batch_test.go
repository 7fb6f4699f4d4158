package loop_test

import (
	"context"
	"errors"
	"io"
	"testing"

	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/loop/looptest"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// TestRoundPublishedAsOneBatch runs a round of three calls on a dispatcher
// that publishes batches, one of whose calls it refuses: the round goes out
// as one batch, the two accepted calls are answered from their results and
// the refused one by the loop, each call id once; a round of one call is
// published alone.
func TestRoundPublishedAsOneBatch(t *testing.T) {
	m := looptest.NewModel(
		looptest.Calls(looptest.Call("c1", "echo", `{"text":"one"}`), looptest.Call("c2", "echo", `{"text":"two"}`),
			looptest.Call("c3", "add", `{"a":1,"b":2}`)),
		looptest.Calls(looptest.Call("c4", "echo", `{"text":"alone"}`)),
		looptest.Answer("ok"))
	d := looptest.NewBatcher(handler)
	d.PublishErr = func(c protocol.Call) error {
		if c.CallID == "c2" {
			return errors.New("refused")
		}
		return nil
	}
	r, err := loop.New(loop.Config{Logger: zerolog.New(io.Discard), Grace: fastConfig().Grace, CancelTimeout: fastConfig().CancelTimeout},
		m, looptest.NewCatalog(specs()...), d, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Wait)
	res, err := r.Run(t.Context(), "go")
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	checkInvariants(t, res)
	batches := d.Batches()
	if len(batches) != 1 || len(batches[0]) != 3 {
		t.Fatalf("batches = %v, want one batch of the first round's 3 calls", batches)
	}
	want := map[string]protocol.Outcome{"c1": protocol.OutcomeOK, "c3": protocol.OutcomeOK, "c4": protocol.OutcomeOK}
	for _, c := range res.Calls {
		if w, ok := want[c.CallID]; ok && c.Outcome != w {
			t.Errorf("%s: outcome %s, want %s", c.CallID, c.Outcome, w)
		}
		if c.CallID == "c2" && c.Outcome == protocol.OutcomeOK {
			t.Errorf("c2 was refused by the dispatcher but answered ok")
		}
	}
	if len(res.Calls) != 4 {
		t.Fatalf("%d calls answered, want 4", len(res.Calls))
	}
	if got := toolMessages(res); got["c1"] != "one" || got["c4"] != "alone" || got["c3"] != "3" {
		t.Fatalf("observations = %v", got)
	}
}

// TestNonIdempotentCallsArePublishedAtMostOnce: every call to a tool the
// catalog says is not idempotent is published under loop.WithAtMostOnce,
// in a batch and alone, and no call to an idempotent tool is, so that a
// fleet claims exactly those before running them.
func TestNonIdempotentCallsArePublishedAtMostOnce(t *testing.T) {
	safe := looptest.MustSpec("safe", openSchema)
	safe.Idempotent = true
	once := looptest.MustSpec("once", openSchema)
	answer := func(ctx context.Context, c protocol.Call) (protocol.Result, bool) { return looptest.OK("done"), true }
	for _, batched := range []bool{true, false} {
		t.Run(map[bool]string{true: "batch", false: "alone"}[batched], func(t *testing.T) {
			var d loop.Dispatcher
			plain := looptest.New(answer)
			d = plain
			if batched {
				b := looptest.NewBatcher(answer)
				d, plain = b, b.Dispatcher
			}
			m := looptest.NewModel(looptest.Calls(looptest.Call("c1", "safe", `{}`), looptest.Call("c2", "once", `{}`)), looptest.Answer("ok"))
			if !batched {
				m = looptest.NewModel(looptest.Calls(looptest.Call("c1", "safe", `{}`)), looptest.Calls(looptest.Call("c2", "once", `{}`)), looptest.Answer("ok"))
			}
			r, err := loop.New(loop.Config{Logger: zerolog.New(io.Discard)}, m, looptest.NewCatalog(safe, once), d, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(plain.Wait)
			res, err := r.Run(t.Context(), "go")
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			checkInvariants(t, res)
			for _, c := range res.Calls {
				if got, want := plain.AtMostOnce(c.CallKey), c.Tool == "once"; got != want {
					t.Errorf("%s (%s): published at most once %v, want %v", c.CallID, c.Tool, got, want)
				}
			}
		})
	}
}
