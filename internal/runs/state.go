// Package runs reads and steers durable runs from their journals: what
// "coordinator runs" lists, shows, cancels, resumes, replays, forks and
// sends input to. Everything it reads is in the journal stream and the
// runs bucket, so the nats CLI sees the same ("coordinator runs -h" lists
// its commands). It parses no flags and prints nothing.
package runs

import (
	"encoding/json"
	"time"

	"github.com/toolfleet/toolfleet/internal/natsbus/stores"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// The statuses of a [State].
const (
	StatusRunning         = "running"
	StatusFinished        = "finished"
	StatusParked          = "parked"
	StatusCancelRequested = "cancel_requested"
)

// State is what a run's journal says about it.
type State struct {
	RunID protocol.RunID `json:"run_id"`
	// Status is "running" (an owner is at it, or it waits for one),
	// "finished", "parked" (its model failed: no coordinator owns it
	// until "runs resume"), or "cancel_requested" while a cancel is on
	// its way.
	Status string `json:"status"`
	// ParkReason says why a parked run parked.
	ParkReason string `json:"park_reason,omitempty"`
	// Client and Agent are the served run's submitting client and agent
	// (its request entry); empty for a run of "coordinator run".
	Client string `json:"client,omitempty"`
	Agent  string `json:"agent,omitempty"`
	// StartedAt is when its first entry was stored.
	StartedAt time.Time `json:"started_at"`
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
func Summarize(run protocol.RunID, recs []stores.JournalRecord) State {
	st := State{RunID: run, Status: StatusRunning, Entries: len(recs)}
	if len(recs) > 0 {
		st.StartedAt = recs[0].Time
	}
	decided := map[protocol.CallKey]bool{}
	observed := map[int]bool{}
	var dispatched, approvals []loop.JournalEntry
	for _, r := range recs {
		e := r.Entry
		st.LastStep, st.LastAt = e.Kind, r.Time
		st.Status, st.ParkReason = StatusRunning, "" // a parked run is resumed by any entry after it
		switch e.Kind {
		case stores.EntryRequest:
			var req struct {
				Client string `json:"client"`
				Agent  string `json:"agent"`
			}
			if json.Unmarshal(e.Data, &req) == nil && protocol.ValidToken(req.Client) {
				st.Client = req.Client
				if protocol.ValidToken(req.Agent) {
					st.Agent = req.Agent
				}
			}
		case loop.EntryParked:
			st.Status, st.ParkReason = StatusParked, e.Reason
		case stores.EntryOwner:
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
			st.Termination = e.Termination
		}
		if st.Termination != "" {
			st.Status = StatusFinished
		}
	}
	if st.Status == StatusFinished {
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
