package loop_test

import (
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
