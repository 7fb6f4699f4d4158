package stores_test

import (
	"errors"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/natsbus/stores"
	"github.com/toolfleet/toolfleet/internal/natstest"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// TestJournalFencing: a second owner that opens a run's journal reads
// everything the first appended, and from then on the first can append
// nothing (loop.ErrFenced), while the second goes on.
func TestJournalFencing(t *testing.T) {
	srv := natstest.Start(t)
	js, err := jetstream.New(natstest.Connect(t, srv))
	if err != nil {
		t.Fatal(err)
	}
	s := protocol.Subjects{}
	if _, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: s.JournalStream(), Subjects: []string{s.JournalSubjects()}, AllowDirect: true}); err != nil {
		t.Fatal(err)
	}
	const run = "run-1"
	a, err := stores.OpenJournal(t.Context(), js, s, run, "a", "start")
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Entries()) != 0 {
		t.Fatalf("a new run's journal has %d entries", len(a.Entries()))
	}
	for round := 1; round <= 3; round++ {
		if err := a.Append(t.Context(), loop.JournalEntry{Kind: loop.EntryModel, Round: round, Response: &loop.JournaledResponse{}}); err != nil {
			t.Fatal(err)
		}
	}
	b, err := stores.OpenJournal(t.Context(), js, s, run, "b", "resume")
	if err != nil {
		t.Fatal(err)
	}
	kinds := []string{}
	for _, e := range b.Entries() {
		kinds = append(kinds, e.Kind)
	}
	if len(kinds) != 4 || kinds[0] != stores.EntryOwner || kinds[3] != loop.EntryModel {
		t.Fatalf("b read %v", kinds)
	}
	if err := a.Append(t.Context(), loop.JournalEntry{Kind: loop.EntryFinished}); !errors.Is(err, loop.ErrFenced) || !a.Fenced() {
		t.Fatalf("stale owner's append: %v, want fenced", err)
	}
	if err := a.Append(t.Context(), loop.JournalEntry{Kind: loop.EntryFinished}); !errors.Is(err, loop.ErrFenced) {
		t.Fatalf("stale owner's second append: %v, want fenced", err)
	}
	if err := b.Append(t.Context(), loop.JournalEntry{Kind: loop.EntryFinished}); err != nil {
		t.Fatalf("new owner's append: %v", err)
	}
	recs, err := stores.ReadJournal(t.Context(), js, s, run)
	if err != nil || len(recs) != 6 {
		t.Fatalf("journal holds %d entries (%v), want 6", len(recs), err)
	}
	runs, err := stores.ListJournals(t.Context(), js, s)
	if err != nil || runs[run] != 6 {
		t.Fatalf("ListJournals = %v, %v", runs, err)
	}
}

// TestJournalPipelinedAppend: an entry appended while the run goes on
// (AppendAsync) is fenced like any other: stored in order before the next
// append, and refused, with the owner fenced, once another coordinator took
// the run; a later Append reports the refusal and stores nothing.
func TestJournalPipelinedAppend(t *testing.T) {
	srv := natstest.Start(t)
	js, err := jetstream.New(natstest.Connect(t, srv))
	if err != nil {
		t.Fatal(err)
	}
	s := protocol.Subjects{}
	if _, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: s.JournalStream(), Subjects: []string{s.JournalSubjects()}, AllowDirect: true}); err != nil {
		t.Fatal(err)
	}
	const run = "run-pipelined"
	a, err := stores.OpenJournal(t.Context(), js, s, run, "a", "start")
	if err != nil {
		t.Fatal(err)
	}
	var stored []string
	settled := a.AppendAsyncThen(t.Context(), loop.JournalEntry{Kind: loop.EntryPublished, Round: 1}, func(e loop.JournalEntry) { stored = append(stored, e.Kind) })
	if err := a.Append(t.Context(), loop.JournalEntry{Kind: loop.EntryObserved, Round: 1}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-settled:
	default:
		t.Fatal("an append returned before the pipelined one before it settled")
	}
	if len(stored) != 1 {
		t.Fatalf("stored hook ran %d times", len(stored))
	}
	recs, err := stores.ReadJournal(t.Context(), js, s, run)
	if err != nil || len(recs) != 3 || recs[1].Entry.Kind != loop.EntryPublished || recs[2].Entry.Kind != loop.EntryObserved {
		t.Fatalf("journal %+v, %v: want owner, published, observed", recs, err)
	}

	// b takes the run over; a's pipelined append is refused.
	b, err := stores.OpenJournal(t.Context(), js, s, run, "b", "resume")
	if err != nil {
		t.Fatal(err)
	}
	settled = a.AppendAsync(t.Context(), loop.JournalEntry{Kind: loop.EntryPublished, Round: 2})
	<-settled
	if err := a.Flush(t.Context()); !errors.Is(err, loop.ErrFenced) || !a.Fenced() {
		t.Fatalf("stale owner's pipelined append: %v, want fenced", err)
	}
	if err := a.Flush(t.Context()); err != nil {
		t.Fatalf("a second flush: %v, want nil (nothing in flight)", err)
	}
	a.AppendAsync(t.Context(), loop.JournalEntry{Kind: loop.EntryPublished, Round: 2})
	if err := a.Append(t.Context(), loop.JournalEntry{Kind: loop.EntryObserved, Round: 2}); !errors.Is(err, loop.ErrFenced) {
		t.Fatalf("stale owner's append after a pipelined one: %v, want fenced", err)
	}
	if err := b.Append(t.Context(), loop.JournalEntry{Kind: loop.EntryFinished}); err != nil {
		t.Fatalf("new owner's append: %v", err)
	}
	recs, err = stores.ReadJournal(t.Context(), js, s, run)
	if err != nil || len(recs) != 5 {
		t.Fatalf("journal holds %d entries (%v), want 5", len(recs), err)
	}
}

// TestJournalBatchAppend: entries appended together are one message of
// the journal stream, read back as entries in order; a stale owner's batch
// is refused whole.
func TestJournalBatchAppend(t *testing.T) {
	srv := natstest.Start(t)
	js, err := jetstream.New(natstest.Connect(t, srv))
	if err != nil {
		t.Fatal(err)
	}
	s := protocol.Subjects{}
	if _, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: s.JournalStream(), Subjects: []string{s.JournalSubjects()}, AllowDirect: true}); err != nil {
		t.Fatal(err)
	}
	const run = "run-batch"
	a, err := stores.OpenJournal(t.Context(), js, s, run, "a", "start")
	if err != nil {
		t.Fatal(err)
	}
	batch := []loop.JournalEntry{
		{Kind: loop.EntryModel, Round: 1, Response: &loop.JournaledResponse{}},
		{Kind: loop.EntryDispatched, Round: 1, Calls: []loop.JournaledCall{{CallKey: "k1", Tool: "echo"}}},
	}
	if err := a.AppendBatch(t.Context(), batch); err != nil {
		t.Fatal(err)
	}
	if err := a.Append(t.Context(), loop.JournalEntry{Kind: loop.EntryPublished, Round: 1}); err != nil {
		t.Fatal(err)
	}
	recs, err := stores.ReadJournal(t.Context(), js, s, run)
	if err != nil || len(recs) != 4 {
		t.Fatalf("journal %+v, %v: want owner, model, dispatched, published", recs, err)
	}
	if recs[1].Entry.Kind != loop.EntryModel || recs[2].Entry.Kind != loop.EntryDispatched || recs[3].Entry.Kind != loop.EntryPublished ||
		recs[1].Seq != recs[2].Seq || recs[2].Seq == recs[3].Seq {
		t.Fatalf("journal %+v: want the batch in one message, in order", recs)
	}
	if runs, err := stores.ListJournals(t.Context(), js, s); err != nil || runs[run] != 3 {
		t.Fatalf("ListJournals = %v, %v: want 3 messages", runs, err)
	}
	b, err := stores.OpenJournal(t.Context(), js, s, run, "b", "resume")
	if err != nil {
		t.Fatal(err)
	}
	if n := len(b.Entries()); n != 4 {
		t.Fatalf("b read %d entries, want 4", n)
	}
	if err := a.AppendBatch(t.Context(), batch); !errors.Is(err, loop.ErrFenced) {
		t.Fatalf("stale owner's batch: %v, want fenced", err)
	}
	recs, err = stores.ReadJournal(t.Context(), js, s, run)
	if err != nil || len(recs) != 5 {
		t.Fatalf("journal holds %d entries (%v), want 5", len(recs), err)
	}
}
