package stores_test

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolfleet/toolfleet/internal/natsbus/bustest"
	"github.com/toolfleet/toolfleet/internal/natsbus/stores"
	"github.com/toolfleet/toolfleet/internal/natstest"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// TestJournalAppendsAcrossLeaderChanges appends to the journals of four
// runs on a 3-node cluster (the journal stream R3) while the journal
// stream's leader is asked to step down ($JS.API.STREAM.LEADER.STEPDOWN),
// and every third time its node is shut down instead and started again
// once a new leader is elected: twelve leader changes, each once every
// journal has gone on appending since the last. No append fails and none
// is reported fenced unless another owner appended: each run's journal
// holds every entry its owner was told was stored, once, in order.
// Halfway, a second owner takes one of the runs over (OpenJournal, while
// its first owner pauses between appends, as one whose heartbeat lapsed):
// its open is not refused, the first owner's next append is fenced, and
// the second's appends are stored.
func TestJournalAppendsAcrossLeaderChanges(t *testing.T) {
	// Not parallel: elections slow down on a starved machine.
	c := natstest.StartCluster(t, 3)
	s := protocol.Subjects{}
	opts := []nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(50 * time.Millisecond)}
	admin := bustest.ConnectJS(t, c.URLs(), opts...)
	provisionR3(t, admin, s)
	stream := s.JournalStream()
	natstest.WaitStreamsCurrent(t, admin, time.Minute, stream)
	js := bustest.ConnectJS(t, c.URLs(), opts...)

	const runs, faults = 4, 12
	const taken = protocol.RunID("run-0") // the run a second owner takes over
	const secondRounds = 1000             // the second owner's rounds start here
	type appender struct {
		run    protocol.RunID
		j      *stores.Journal
		rounds []int // rounds the owner was told were stored
		// hold, when set, is held by each append: the test takes it to
		// open the run as a second owner while the first does not append,
		// as a coordinator takes over a run whose owner stopped.
		hold *sync.Mutex
		err  error // the append that ended its loop
	}
	var (
		appended atomic.Int64 // appends stored, over every journal
		ended    atomic.Int64 // appenders that stopped on an error
		alive    atomic.Int64 // appenders appending
		other    atomic.Bool  // the second owner is taking run-0 over
		stop     = make(chan struct{})
		wg       sync.WaitGroup
	)
	appendUntilStopped := func(a *appender, first int) {
		defer wg.Done()
		defer alive.Add(-1)
		for r := first; ; r++ {
			select {
			case <-stop:
				return
			default:
			}
			if a.hold != nil {
				a.hold.Lock()
			}
			err := a.j.Append(t.Context(), loop.JournalEntry{Kind: loop.EntryModel, Round: r, Response: &loop.JournaledResponse{}})
			if a.hold != nil {
				a.hold.Unlock()
			}
			if err != nil {
				a.err = fmt.Errorf("append of round %d: %w", r, err)
				if errors.Is(err, loop.ErrFenced) && (a.run != taken || !other.Load()) {
					a.err = fmt.Errorf("append of round %d reported fenced while no other owner appended: %w", r, err)
				}
				ended.Add(1)
				return
			}
			a.rounds = append(a.rounds, r)
			appended.Add(1)
		}
	}
	var firsts []*appender
	for i := range runs {
		run := protocol.RunID(fmt.Sprintf("run-%d", i))
		j, err := stores.OpenJournal(t.Context(), js, s, run, "first", stores.NoteStart)
		if err != nil {
			t.Fatalf("opening %s: %v", run, err)
		}
		a := &appender{run: run, j: j}
		if run == taken {
			a.hold = new(sync.Mutex)
		}
		firsts = append(firsts, a)
	}
	for _, a := range firsts {
		wg.Add(1)
		alive.Add(1)
		go appendUntilStopped(a, 1)
	}
	// goOn waits until the journals have gone on appending since the last
	// fault (or an appender stopped, which the checks below report).
	goOn := func(what string) {
		t.Helper()
		from, stopped := appended.Load(), ended.Load()
		natstest.WaitFor(t, 2*time.Minute, func() error {
			if appended.Load() >= from+runs || ended.Load() > stopped || alive.Load() == 0 {
				return nil
			}
			return fmt.Errorf("waiting for the journals to append %s (%d appends so far)", what, appended.Load())
		})
	}
	second := &appender{run: taken}
	kills := 0
	for k := 1; k <= faults; k++ {
		goOn(fmt.Sprintf("before leader change %d", k))
		if k == faults/2 {
			// An open that cannot read the journal (an election) is
			// tried again, as a coordinator takes the run again; one
			// reported fenced while the first owner does not append is
			// wrong.
			firsts[0].hold.Lock()
			other.Store(true)
			natstest.WaitFor(t, 2*time.Minute, func() error {
				j, err := stores.OpenJournal(t.Context(), js, s, taken, "second", stores.NoteResume)
				if errors.Is(err, loop.ErrFenced) {
					t.Fatalf("the second owner opening %s while the first appends nothing: %v", taken, err)
				}
				if err != nil {
					return fmt.Errorf("the second owner opening %s: %w", taken, err)
				}
				second.j = j
				return nil
			})
			firsts[0].hold.Unlock()
			wg.Add(1)
			alive.Add(1)
			go appendUntilStopped(second, secondRounds)
		}
		leader := c.WaitForStreamLeader("", stream, time.Minute)
		if k%3 != 0 {
			natstest.StepDownStream(t, admin, stream, time.Minute)
			continue
		}
		c.Kill(leader)
		kills++
		c.WaitForStreamLeader("", stream, 2*time.Minute)
		goOn(fmt.Sprintf("while node %d is down", leader))
		c.Restart(leader)
		c.WaitForMetaLeader(2 * time.Minute)
		natstest.WaitStreamsCurrent(t, admin, 2*time.Minute, stream)
	}
	goOn("after the last leader change")
	close(stop)
	wg.Wait()
	t.Logf("%d appends stored across %d leader changes (%d of them a node shut down)", appended.Load(), faults, kills)

	for _, a := range append(firsts, second) {
		switch {
		case a.run == taken && a != second:
			if !errors.Is(a.err, loop.ErrFenced) || !a.j.Fenced() {
				t.Errorf("%s's first owner after the second took it over: %v, want fenced", a.run, a.err)
			}
		case a.err != nil:
			t.Errorf("%s: %v", a.run, a.err)
		}
		if len(a.rounds) == 0 {
			t.Errorf("%s: nothing was appended", a.run)
		}
	}
	for _, a := range firsts {
		var recs []stores.JournalRecord
		natstest.WaitFor(t, 2*time.Minute, func() error {
			var err error
			if recs, err = stores.ReadJournal(t.Context(), admin, s, a.run); err != nil {
				return fmt.Errorf("reading %s's journal: %w", a.run, err)
			}
			return nil
		})
		var owners []string
		var rounds []int
		for _, r := range recs {
			switch r.Entry.Kind {
			case stores.EntryOwner:
				owners = append(owners, r.Entry.Owner)
			case loop.EntryModel:
				rounds = append(rounds, r.Entry.Round)
			}
		}
		want, wantOwners := a.rounds, []string{"first"}
		if a.run == taken {
			want, wantOwners = append(slices.Clone(a.rounds), second.rounds...), []string{"first", "second"}
		}
		if !slices.Equal(owners, wantOwners) || !slices.Equal(rounds, want) {
			t.Errorf("%s's journal: owners %v, rounds %v; want owners %v, rounds %v (each once, in order)", a.run, owners, rounds, wantOwners, want)
		}
		if a.run == taken {
			// Nothing of the first owner's after the second's owner entry.
			for i, r := range recs {
				if r.Entry.Kind == stores.EntryOwner && r.Entry.Owner == "second" {
					for _, after := range recs[i+1:] {
						if after.Entry.Round < secondRounds {
							t.Errorf("%s: the first owner's round %d is stored after the second took the run", a.run, after.Entry.Round)
						}
					}
				}
			}
		}
	}
}
