// Package runs shows and steers durable runs from their journals:
// "coordinator runs list | show RUN | cancel RUN". Everything it shows is
// read from the journal stream and the runs bucket, so the nats CLI sees
// the same (see Command's usage).
package runs

import (
	"time"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// State is what a run's journal says about it.
type State struct {
	RunID protocol.RunID `json:"run_id"`
	// Status is "running" (an owner is at it, or it waits for one),
	// "finished", or "cancel_requested" while a cancel is on its way.
	Status string `json:"status"`
	// Termination is the loop's termination reason once finished.
	Termination loop.TerminationReason `json:"termination,omitempty"`
	// Owner is the coordinator that took the run last; Owners counts the
	// takeovers (1: never resumed).
	Owner  string `json:"owner,omitempty"`
	Owners int    `json:"owners"`
	// Round is the last round with a model response.
	Round int `json:"round"`
	// PendingCalls are the calls of the last round dispatched and not yet
	// observed; PendingApprovals the calls waiting for a decision.
	PendingCalls     []loop.JournaledCall `json:"pending_calls,omitempty"`
	PendingApprovals []loop.JournaledCall `json:"pending_approvals,omitempty"`
	// ApprovalDeadline is the pending approvals' deadline.
	ApprovalDeadline time.Time `json:"approval_deadline,omitzero"`
	// LastStep is the kind of the last entry, LastAt when it was stored.
	LastStep string    `json:"last_step"`
	LastAt   time.Time `json:"last_at"`
	Entries  int       `json:"entries"`
	// HasResult says whether the runs bucket holds the run's result.
	HasResult bool `json:"has_result"`
	// DryRun: the run is a dry run (its journaled policy says so).
	DryRun bool `json:"dry_run,omitempty"`
}

// Summarize reads a run's state from its journal.
func Summarize(run protocol.RunID, recs []natsbus.JournalRecord) State {
	st := State{RunID: run, Status: "running", Entries: len(recs)}
	decided := map[protocol.CallKey]bool{}
	observed := map[int]bool{}
	var dispatched, approvals []loop.JournalEntry
	for _, r := range recs {
		e := r.Entry
		st.LastStep, st.LastAt = e.Kind, r.Time
		switch e.Kind {
		case natsbus.EntryOwner:
			st.Owner = e.Owner
			st.Owners++
		case loop.EntryStart:
			st.DryRun = e.Policy != nil && e.Policy.DryRun
		case loop.EntryModel:
			st.Round = max(st.Round, e.Round)
		case loop.EntryApprovalRequested:
			approvals = append(approvals, e)
		case loop.EntryApprovalDecided:
			if e.Decision != nil {
				decided[e.Decision.CallKey] = true
			}
		case loop.EntryDispatched:
			dispatched = append(dispatched, e)
		case loop.EntryObserved:
			observed[e.Round] = true
		case loop.EntryFinished:
			st.Status, st.Termination = "finished", e.Termination
		}
	}
	if st.Status == "finished" {
		return st
	}
	for _, e := range approvals {
		if observed[e.Round] {
			continue
		}
		for _, c := range e.Calls {
			if !decided[c.CallKey] {
				st.PendingApprovals = append(st.PendingApprovals, c)
				st.ApprovalDeadline = e.Deadline
			}
		}
	}
	for _, e := range dispatched {
		if !observed[e.Round] {
			st.PendingCalls = append(st.PendingCalls, e.Calls...)
		}
	}
	return st
}
