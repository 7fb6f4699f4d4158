package runs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natsbus/admission"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// maxNotedRuns bounds the run ids an audit record lists; Count counts
// them all.
const maxNotedRuns = 80

// Note is the audit record of a change to many runs at once ("runs
// cancel|resume FILTER --yes"), stored in the traffic stream, the audit
// log operators write, on <prefix>.traffic.runs.<action> (no tool's
// subject: a tool's is one token after "traffic") before any run is
// changed.
type Note struct {
	V int `json:"v"`
	// Action is "cancel" or "resume".
	Action string `json:"action"`
	// Filter is the selection, as given.
	Filter NoteFilter `json:"filter"`
	// Count is how many runs it selected; Runs lists them (the first 80: a traffic record holds at most 4 KiB).
	Count int              `json:"count"`
	Runs  []protocol.RunID `json:"runs"`
	// By names the operator, Reason says why.
	By     string    `json:"by"`
	Reason string    `json:"reason,omitempty"`
	At     time.Time `json:"at"`
}

// NoteFilter is a [Filter] as an audit record holds it.
type NoteFilter struct {
	State     string `json:"state,omitempty"`
	Agent     string `json:"agent,omitempty"`
	Client    string `json:"client,omitempty"`
	OlderThan string `json:"older_than,omitempty"`
}

// NoteSubject is the subject of the audit records of action.
func NoteSubject(subjects protocol.Subjects, action string) string {
	return subjects.TrafficNotes()[:len(subjects.TrafficNotes())-1] + "runs." + action
}

// Record stores the audit record of action on states, selected by f, by
// by and for reason, before any of them is changed.
func Record(ctx context.Context, js natsbus.JetStream, subjects protocol.Subjects, action string, f Filter, states []State, by, reason string) error {
	n := Note{V: protocol.Version, Action: action, Count: len(states), By: by, Reason: reason, At: time.Now().UTC(),
		Filter: NoteFilter{State: f.Status, Agent: f.Agent, Client: f.Client}}
	if f.OlderThan > 0 {
		n.Filter.OlderThan = f.OlderThan.String()
	}
	for _, st := range states[:min(len(states), maxNotedRuns)] {
		n.Runs = append(n.Runs, st.RunID)
	}
	data, err := json.Marshal(n)
	if err != nil {
		return err
	}
	if err := admission.RecordTraffic(ctx, js, subjects, NoteSubject(subjects, action), data); err != nil {
		return fmt.Errorf("recording the change in %s: %w", subjects.TrafficStream(), err)
	}
	return nil
}

// WakeToEnd resumes run when it is parked, after a cancel ([Cancel]): no
// coordinator owns a parked run, and the one that takes it again ends it
// cancelled. woken reports that it was parked and is taken again.
func WakeToEnd(ctx context.Context, nc *nats.Conn, js natsbus.JetStream, subjects protocol.Subjects, run protocol.RunID, by, reason string) (woken bool, err error) {
	st, err := Get(ctx, js, subjects, run)
	if err != nil || st.Status != StatusParked {
		return false, nil
	}
	if _, err := Resume(ctx, nc, js, subjects, run, by, reason); err != nil && !errors.Is(err, ErrNotParked) {
		return false, fmt.Errorf("the run is parked, and its cancel waits for a resume: %w", err)
	}
	return true, nil
}

// Targets returns the runs f selects that action ("cancel" or "resume")
// applies to: for resume the parked ones, for cancel those not finished.
func Targets(ctx context.Context, js natsbus.JetStream, subjects protocol.Subjects, action string, f Filter) ([]State, error) {
	all, err := Select(ctx, js, subjects, f)
	if err != nil {
		return nil, err
	}
	var states []State
	for _, st := range all {
		if (action == "resume" && st.Status == StatusParked) || (action == "cancel" && st.Status != StatusFinished) {
			states = append(states, st)
		}
	}
	return states, nil
}
