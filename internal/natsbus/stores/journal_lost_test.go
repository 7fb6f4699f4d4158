package stores_test

import (
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natsbus/stores"
	"github.com/toolfleet/toolfleet/internal/natstest"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// TestJournalIncomplete: a journal is incomplete when what is read does
// not begin with the owner entry of the run's start, or when a run taken
// before finds nothing while the stream has lost messages; a run whose
// first owner died before its first append, in a stream that never lost
// one, simply starts.
func TestJournalIncomplete(t *testing.T) {
	srv := natstest.Start(t)
	js, err := jetstream.New(natstest.Connect(t, srv))
	if err != nil {
		t.Fatal(err)
	}
	s := protocol.Subjects{}
	if err := natsbus.EnsureStreams(t.Context(), js, s, natsbus.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	open := func(run protocol.RunID, note string) *stores.Journal {
		t.Helper()
		j, err := stores.OpenJournal(t.Context(), js, s, run, "c", note)
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	if j := open("never-appended", stores.NoteResume); j.Incomplete() {
		t.Fatal("an empty journal in a stream that lost nothing is incomplete")
	}
	// The owner that found it empty started the run: the next owner to
	// take it over finds a whole journal (a run taken three times, its
	// first owner killed before its first append).
	if j := open("never-appended", stores.NoteResume); j.Incomplete() {
		t.Fatal("the journal of a run started by its second owner is incomplete for its third")
	}
	j := open("whole", stores.NoteStart)
	if err := j.Append(t.Context(), loop.JournalEntry{Kind: loop.EntryStart, Secret: "abcdefghijklmnopqrstuvwxyz234567"}); err != nil {
		t.Fatal(err)
	}
	if j := open("whole", stores.NoteResume); j.Incomplete() {
		t.Fatal("a whole journal is incomplete")
	}
	st, err := js.Stream(t.Context(), s.JournalStream())
	if err != nil {
		t.Fatal(err)
	}
	subj, _ := s.Journal("whole")
	if err := st.Purge(t.Context(), jetstream.WithPurgeSubject(subj), jetstream.WithPurgeKeep(1)); err != nil {
		t.Fatal(err)
	}
	if j := open("whole", stores.NoteResume); !j.Incomplete() {
		t.Fatal("a journal without its first entries is complete")
	}
	if j := open("never-appended-2", stores.NoteResume); !j.Incomplete() {
		t.Fatal("an empty journal of a run taken before, in a stream that lost entries, is complete")
	}
}
