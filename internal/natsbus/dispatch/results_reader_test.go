package dispatch_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/internal/natsbus/bustest"
	"github.com/toolfleet/toolfleet/internal/natsbus/dispatch"
	"github.com/toolfleet/toolfleet/internal/natstest"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// TestOneResultsConsumerForManyRuns: a dispatcher reads the results of all
// its runs through one consumer, each result reaching only its run's
// inbox; a result of a run with no inbox is dropped and counted; Close
// deletes the consumer.
func TestOneResultsConsumerForManyRuns(t *testing.T) {
	f := bustest.NewFleet(t)
	d := f.Dispatcher(dispatch.DispatcherConfig{})
	defer d.Close()
	const runs = 40
	inboxes := make(map[protocol.RunID]loop.Inbox, runs)
	for range runs {
		run := protocol.NewRunID()
		in, err := d.Open(bustest.Ctx(t), run)
		if err != nil {
			t.Fatal(err)
		}
		defer in.Close()
		inboxes[run] = in
	}
	if got := f.ResultsConsumers(t); got != 1 {
		t.Fatalf("the results stream has %d consumers for %d runs, want 1", got, runs)
	}
	for run, in := range inboxes {
		key := f.StoreResult(t, run)
		if r := bustest.NextResult(t, in, key, 10*time.Second); r.RunID != run {
			t.Fatalf("run %s got a result of %s", run, r.RunID)
		}
	}
	for _, in := range inboxes {
		if n := len(in.Events()); n != 0 {
			t.Fatalf("an inbox holds %d more events, want none (another run's result)", n)
		}
	}
	f.StoreResult(t, protocol.NewRunID())
	natstest.WaitFor(t, 10*time.Second, func() error {
		if got := strings.Count(f.Log.String(), bustest.UnknownRun); got != 1 {
			return fmt.Errorf("%d results of an unknown run dropped, want 1", got)
		}
		return nil
	})
	for _, in := range inboxes {
		in.Close()
	}
	if got := f.ResultsConsumers(t); got != 1 {
		t.Fatalf("after the runs closed the results stream has %d consumers, want the dispatcher's 1", got)
	}
	d.Close()
	natstest.WaitFor(t, 10*time.Second, func() error {
		if got := f.ResultsConsumers(t); got != 0 {
			return fmt.Errorf("after Close the results stream has %d consumers, want 0", got)
		}
		return nil
	})
	if _, err := d.Open(bustest.Ctx(t), protocol.NewRunID()); err == nil {
		t.Fatal("Open after Close succeeded")
	}
}

// TestCaughtUpDeliversPastResultsOnce: a run opened after some of its
// results were stored (a resumed run) gets them from CaughtUp — those
// stored before the dispatcher's consumer existed and those it read before
// the run's inbox opened — and every result exactly once, with those
// stored after Open.
func TestCaughtUpDeliversPastResultsOnce(t *testing.T) {
	f := bustest.NewFleet(t)
	run := protocol.NewRunID()
	beforeReader := f.StoreResult(t, run)

	d := f.Dispatcher(dispatch.DispatcherConfig{})
	defer d.Close()
	other, err := d.Open(bustest.Ctx(t), protocol.NewRunID()) // starts the consumer
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	beforeOpen := f.StoreResult(t, run)
	natstest.WaitFor(t, 10*time.Second, func() error {
		if got := strings.Count(f.Log.String(), bustest.UnknownRun); got != 1 {
			return fmt.Errorf("%d results of an unknown run dropped, want 1 (the result stored before Open)", got)
		}
		return nil
	})

	in, err := d.Open(bustest.Ctx(t), run)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	afterOpen := f.StoreResult(t, run)
	caught := in.(loop.CatchUpInbox).CaughtUp()
	select {
	case <-caught:
	case <-time.After(30 * time.Second):
		t.Fatal("CaughtUp never closed")
	}
	last := f.StoreResult(t, run)
	seen := map[protocol.CallKey]int{}
	bustest.NextEvent(t, in, 10*time.Second, func(ev loop.Event) bool {
		if ev.Result == nil {
			return false
		}
		seen[ev.Result.CallKey]++
		return ev.Result.CallKey == last && seen[beforeReader] > 0 && seen[beforeOpen] > 0 && seen[afterOpen] > 0
	})
	for _, k := range []protocol.CallKey{beforeReader, beforeOpen, afterOpen, last} {
		if seen[k] != 1 {
			t.Errorf("result %s delivered %d times, want 1 (all: %v)", k, seen[k], seen)
		}
	}
	if n := len(in.Events()); n != 0 {
		t.Errorf("%d more events after the last result, want none", n)
	}
}
