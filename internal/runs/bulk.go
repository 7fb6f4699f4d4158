package runs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolfleet/toolfleet/internal/natsbus"
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

// record stores the audit record of action on states, selected by f.
func record(ctx context.Context, js natsbus.JetStream, subjects protocol.Subjects, action string, f Filter, states []State, by, reason string) error {
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
	if err := natsbus.RecordTraffic(ctx, js, subjects, NoteSubject(subjects, action), data); err != nil {
		return fmt.Errorf("recording the change in %s: %w", subjects.TrafficStream(), err)
	}
	return nil
}

// change cancels or resumes one run. A parked run that is cancelled is
// resumed too: no coordinator owns it, and the one that takes it again
// ends it cancelled.
func change(ctx context.Context, nc *nats.Conn, js natsbus.JetStream, subjects protocol.Subjects, action string, run protocol.RunID, by, reason string, w io.Writer) error {
	if action == "resume" {
		st, err := Resume(ctx, nc, js, subjects, run, by, reason)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "run %s resumed by %s\n", run, st.Owner)
		return nil
	}
	if err := Cancel(ctx, js, subjects, run, by, reason); err != nil {
		return err
	}
	fmt.Fprintf(w, "cancel requested for run %s\n", run)
	st, err := Get(ctx, js, subjects, run)
	if err != nil || st.Status != StatusParked {
		return nil
	}
	if _, err := Resume(ctx, nc, js, subjects, run, by, reason); err != nil && !errors.Is(err, ErrNotParked) {
		return fmt.Errorf("the run is parked, and its cancel waits for a resume: %w", err)
	}
	fmt.Fprintf(w, "run %s was parked: resumed, to end cancelled\n", run)
	return nil
}

// bulkChange cancels or resumes every run f selects (resume: only the
// parked ones; cancel: only those not finished): it prints the count and
// the runs, and with act records the change in the audit log, then makes
// it run by run.
func bulkChange(ctx context.Context, nc *nats.Conn, js natsbus.JetStream, subjects protocol.Subjects, action string, f Filter, by, reason string, act bool, w io.Writer) error {
	all, err := Select(ctx, js, subjects, f)
	if err != nil {
		return err
	}
	var states []State
	for _, st := range all {
		if (action == "resume" && st.Status == StatusParked) || (action == "cancel" && st.Status != StatusFinished) {
			states = append(states, st)
		}
	}
	verb := map[string]string{"cancel": "cancelled", "resume": "resumed"}[action]
	if !act {
		fmt.Fprintf(w, "%d run(s) would be %s (run again with --yes):\n", len(states), verb)
		if len(states) > 0 {
			return printStates(w, states)
		}
		return nil
	}
	if len(states) == 0 {
		fmt.Fprintf(w, "0 run(s) %s: none selected\n", verb)
		return nil
	}
	if err := record(ctx, js, subjects, action, f, states, by, reason); err != nil {
		return err
	}
	var failed int
	for _, st := range states {
		if err := change(ctx, nc, js, subjects, action, st.RunID, by, reason, w); err != nil {
			failed++
			fmt.Fprintf(w, "run %s: %v\n", st.RunID, err)
		}
	}
	fmt.Fprintf(w, "%d run(s) %s, %d failed\n", len(states)-failed, verb, failed)
	if failed > 0 {
		return fmt.Errorf("%d of %d run(s) not %s", failed, len(states), verb)
	}
	return nil
}
