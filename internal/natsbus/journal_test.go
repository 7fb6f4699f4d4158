package natsbus_test

import (
	"errors"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/natsbus"
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
	a, err := natsbus.OpenJournal(t.Context(), js, s, run, "a", "start")
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
	b, err := natsbus.OpenJournal(t.Context(), js, s, run, "b", "resume")
	if err != nil {
		t.Fatal(err)
	}
	kinds := []string{}
	for _, e := range b.Entries() {
		kinds = append(kinds, e.Kind)
	}
	if len(kinds) != 4 || kinds[0] != natsbus.EntryOwner || kinds[3] != loop.EntryModel {
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
	recs, err := natsbus.ReadJournal(t.Context(), js, s, run)
	if err != nil || len(recs) != 6 {
		t.Fatalf("journal holds %d entries (%v), want 6", len(recs), err)
	}
	runs, err := natsbus.ListJournals(t.Context(), js, s)
	if err != nil || runs[run] != 6 {
		t.Fatalf("ListJournals = %v, %v", runs, err)
	}
}
