package runs

import (
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/internal/natsbus/stores"
	"github.com/toolfleet/toolfleet/pkg/loop"
)

func rec(e loop.JournalEntry) stores.JournalRecord {
	return stores.JournalRecord{Time: time.Unix(1, 0), Entry: e}
}

// TestSummarize reads owner, round, pending approvals and calls from a
// journal, and nothing pending once the run finished.
func TestSummarize(t *testing.T) {
	deadline := time.Unix(100, 0)
	recs := []stores.JournalRecord{
		rec(loop.JournalEntry{Kind: stores.EntryOwner, Owner: "c1"}),
		rec(loop.JournalEntry{Kind: loop.EntryModel, Round: 1, Response: &loop.JournaledResponse{}}),
		rec(loop.JournalEntry{Kind: loop.EntryApprovalRequested, Round: 1, Deadline: deadline,
			Calls: []loop.JournaledCall{{CallKey: "k1", Tool: "a"}, {CallKey: "k2", Tool: "b"}}}),
		rec(loop.JournalEntry{Kind: loop.EntryApprovalDecided, Decision: &loop.JournaledDecision{CallKey: "k1"}}),
		rec(loop.JournalEntry{Kind: stores.EntryOwner, Owner: "c2"}),
	}
	st := Summarize("r", recs)
	if st.Status != "running" || st.Owner != "c2" || st.Owners != 2 || st.Round != 1 ||
		len(st.PendingApprovals) != 1 || st.PendingApprovals[0].CallKey != "k2" || !st.ApprovalDeadline.Equal(deadline) ||
		len(st.PendingCalls) != 0 || st.LastStep != stores.EntryOwner || st.Entries != 5 {
		t.Fatalf("waiting: %+v", st)
	}
	recs = append(recs,
		rec(loop.JournalEntry{Kind: loop.EntryApprovalDecided, Decision: &loop.JournaledDecision{CallKey: "k2"}}),
		rec(loop.JournalEntry{Kind: loop.EntryDispatched, Round: 1, Calls: []loop.JournaledCall{{CallKey: "k1", Tool: "a"}}}))
	if st := Summarize("r", recs); len(st.PendingApprovals) != 0 || len(st.PendingCalls) != 1 {
		t.Fatalf("dispatched: %+v", st)
	}
	recs = append(recs, rec(loop.JournalEntry{Kind: loop.EntryObserved, Round: 1}),
		rec(loop.JournalEntry{Kind: loop.EntryFinished, Termination: loop.TerminationNatural}))
	if st := Summarize("r", recs); st.Status != "finished" || st.Termination != loop.TerminationNatural || len(st.PendingCalls) != 0 {
		t.Fatalf("finished: %+v", st)
	}
}

// TestSummarizeDryRun: a run whose start journaled a dry run's policy is
// one; any other is not.
func TestSummarizeDryRun(t *testing.T) {
	for _, p := range []*loop.RunPolicy{nil, {}, {DryRun: true}} {
		st := Summarize("r", []stores.JournalRecord{rec(loop.JournalEntry{Kind: loop.EntryStart, Policy: p})})
		if want := p != nil && p.DryRun; st.DryRun != want {
			t.Errorf("policy %+v: DryRun %v, want %v", p, st.DryRun, want)
		}
	}
}
