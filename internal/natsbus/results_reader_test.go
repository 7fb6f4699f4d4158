package natsbus_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natstest"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// storeResult stores an ok result of key for run on its echo subject and
// returns its key.
func (f *fleet) storeResult(t *testing.T, run protocol.RunID) protocol.CallKey {
	t.Helper()
	subj, _ := f.subjects.Result(run, "echo")
	r := protocol.Result{V: 1, RunID: run, CallKey: protocol.NewCallKey(), Outcome: protocol.OutcomeOK}
	data, _ := protocol.Encode(&r)
	if _, err := f.js.Publish(ctx(t), subj, data); err != nil {
		t.Fatal(err)
	}
	return r.CallKey
}

// resultsConsumers counts the consumers of the results stream.
func (f *fleet) resultsConsumers(t *testing.T) int {
	t.Helper()
	s, err := f.js.Stream(ctx(t), f.subjects.ResultsStream())
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Consumers
}

// TestOneResultsConsumerForManyRuns: a dispatcher reads the results of all
// its runs through one consumer, each result reaching only its run's
// inbox; a result of a run with no inbox is dropped and counted; Close
// deletes the consumer.
func TestOneResultsConsumerForManyRuns(t *testing.T) {
	f := newFleet(t)
	d := f.dispatcher(natsbus.DispatcherConfig{})
	defer d.Close()
	const runs = 40
	inboxes := make(map[protocol.RunID]loop.Inbox, runs)
	for range runs {
		run := protocol.NewRunID()
		in, err := d.Open(ctx(t), run)
		if err != nil {
			t.Fatal(err)
		}
		defer in.Close()
		inboxes[run] = in
	}
	if got := f.resultsConsumers(t); got != 1 {
		t.Fatalf("the results stream has %d consumers for %d runs, want 1", got, runs)
	}
	for run, in := range inboxes {
		key := f.storeResult(t, run)
		if r := nextResult(t, in, key, 10*time.Second); r.RunID != run {
			t.Fatalf("run %s got a result of %s", run, r.RunID)
		}
	}
	for _, in := range inboxes {
		if n := len(in.Events()); n != 0 {
			t.Fatalf("an inbox holds %d more events, want none (another run's result)", n)
		}
	}
	f.storeResult(t, protocol.NewRunID())
	natstest.WaitFor(t, 10*time.Second, func() error {
		if got := strings.Count(f.log.String(), unknownRun); got != 1 {
			return fmt.Errorf("%d results of an unknown run dropped, want 1", got)
		}
		return nil
	})
	for _, in := range inboxes {
		in.Close()
	}
	if got := f.resultsConsumers(t); got != 1 {
		t.Fatalf("after the runs closed the results stream has %d consumers, want the dispatcher's 1", got)
	}
	d.Close()
	natstest.WaitFor(t, 10*time.Second, func() error {
		if got := f.resultsConsumers(t); got != 0 {
			return fmt.Errorf("after Close the results stream has %d consumers, want 0", got)
		}
		return nil
	})
	if _, err := d.Open(ctx(t), protocol.NewRunID()); err == nil {
		t.Fatal("Open after Close succeeded")
	}
}

// TestCaughtUpDeliversPastResultsOnce: a run opened after some of its
// results were stored (a resumed run) gets them from CaughtUp — those
// stored before the dispatcher's consumer existed and those it read before
// the run's inbox opened — and every result exactly once, with those
// stored after Open.
func TestCaughtUpDeliversPastResultsOnce(t *testing.T) {
	f := newFleet(t)
	run := protocol.NewRunID()
	beforeReader := f.storeResult(t, run)

	d := f.dispatcher(natsbus.DispatcherConfig{})
	defer d.Close()
	other, err := d.Open(ctx(t), protocol.NewRunID()) // starts the consumer
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	beforeOpen := f.storeResult(t, run)
	natstest.WaitFor(t, 10*time.Second, func() error {
		if got := strings.Count(f.log.String(), unknownRun); got != 1 {
			return fmt.Errorf("%d results of an unknown run dropped, want 1 (the result stored before Open)", got)
		}
		return nil
	})

	in, err := d.Open(ctx(t), run)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	afterOpen := f.storeResult(t, run)
	caught := in.(loop.CatchUpInbox).CaughtUp()
	select {
	case <-caught:
	case <-time.After(30 * time.Second):
		t.Fatal("CaughtUp never closed")
	}
	last := f.storeResult(t, run)
	seen := map[protocol.CallKey]int{}
	nextEvent(t, in, 10*time.Second, func(ev loop.Event) bool {
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
