package runs

import (
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/internal/natsbus/stores"
	"github.com/toolfleet/toolfleet/pkg/loop"
)

// TestSummarizeParked: a journal that ends with the parked entry is a
// parked run, with its reason, client and agent; any entry after it (the
// owner entry of the coordinator that resumed it) makes it running again.
func TestSummarizeParked(t *testing.T) {
	recs := []stores.JournalRecord{
		{Time: time.Unix(10, 0), Entry: loop.JournalEntry{Kind: stores.EntryOwner, Owner: "c1"}},
		rec(loop.JournalEntry{Kind: stores.EntryRequest, Data: []byte(`{"limits":{},"client":"acme","agent":"ops"}`)}),
		rec(loop.JournalEntry{Kind: loop.EntryModel, Round: 1, Response: &loop.JournaledResponse{}}),
		rec(loop.JournalEntry{Kind: loop.EntryObserved, Round: 1}),
		rec(loop.JournalEntry{Kind: loop.EntryParked, Round: 2, Reason: "the model answered openai: HTTP 503"}),
	}
	st := Summarize("r", recs)
	if st.Status != StatusParked || st.ParkReason != "the model answered openai: HTTP 503" || st.Client != "acme" || st.Agent != "ops" ||
		!st.StartedAt.Equal(time.Unix(10, 0)) || st.Owner != "c1" {
		t.Fatalf("parked: %+v", st)
	}
	recs = append(recs, rec(loop.JournalEntry{Kind: stores.EntryOwner, Owner: "c2"}))
	if st := Summarize("r", recs); st.Status != StatusRunning || st.ParkReason != "" || st.Owner != "c2" {
		t.Fatalf("resumed: %+v", st)
	}
	recs = append(recs, rec(loop.JournalEntry{Kind: loop.EntryFinished, Termination: loop.TerminationNatural}))
	if st := Summarize("r", recs); st.Status != StatusFinished {
		t.Fatalf("finished: %+v", st)
	}
}

// TestFilterMatch: each field set must match; an empty filter takes every
// run.
func TestFilterMatch(t *testing.T) {
	now := time.Unix(1000, 0)
	st := State{Status: StatusParked, Agent: "ops", Client: "acme", StartedAt: now.Add(-time.Hour)}
	for _, c := range []struct {
		name string
		f    Filter
		want bool
	}{
		{"empty", Filter{}, true},
		{"state", Filter{Status: StatusParked}, true},
		{"other state", Filter{Status: StatusRunning}, false},
		{"agent", Filter{Agent: "ops"}, true},
		{"other agent", Filter{Agent: "support"}, false},
		{"client", Filter{Client: "acme"}, true},
		{"other client", Filter{Client: "other"}, false},
		{"older", Filter{OlderThan: 30 * time.Minute}, true},
		{"not older", Filter{OlderThan: 2 * time.Hour}, false},
		{"all", Filter{Status: StatusParked, Agent: "ops", Client: "acme", OlderThan: time.Minute}, true},
		{"all but one", Filter{Status: StatusParked, Agent: "ops", Client: "other", OlderThan: time.Minute}, false},
	} {
		if got := c.f.Match(st, now); got != c.want {
			t.Errorf("%s: Match = %v, want %v", c.name, got, c.want)
		}
	}
}
