package runs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// ErrNotParked is returned by [Resume] for a run whose journal does not
// end parked: running, finished, or resumed already.
var ErrNotParked = errors.New("runs: the run is not parked")

// ErrNotResumed is returned by [Resume] when no serving coordinator took
// the run before its context ended: none serves, or none was reached.
var ErrNotResumed = errors.New("runs: no serving coordinator resumed the run")

// resumeRepeat is how often Resume asks again while the run stays
// parked: a request no coordinator heard is lost, and the coordinators
// submit one parking once.
const resumeRepeat = 2 * time.Second

// Resume asks the serving coordinators to resume the parked run, by by
// and for reason, and waits until one took it (its journal no longer
// ends parked) or ctx ends ([ErrNotResumed]). A run that is not parked
// is [ErrNotParked]. The request is core NATS: it needs the operator's
// permission to publish on <prefix>.journal.resume.<run>, and a serving
// coordinator, which submits the run's request again from its journal.
func Resume(ctx context.Context, nc *nats.Conn, js natsbus.JetStream, subjects protocol.Subjects, run protocol.RunID, by, reason string) (State, error) {
	st, err := Get(ctx, js, subjects, run)
	if err != nil {
		return State{}, err
	}
	if st.Status != StatusParked {
		return st, fmt.Errorf("run %s is %s: %w", run, st.Status, ErrNotParked)
	}
	req := protocol.RunResumeRequest{V: protocol.Version, RunID: run, By: by, Reason: reason, At: time.Now().UTC()}
	if err := req.Validate(); err != nil {
		return st, err
	}
	data, err := protocol.Encode(&req)
	if err != nil {
		return st, err
	}
	subject, err := subjects.JournalResume(run)
	if err != nil {
		return st, err
	}
	tick := time.NewTicker(resumeRepeat / 4)
	defer tick.Stop()
	var asked time.Time
	for {
		if time.Since(asked) >= resumeRepeat {
			before := nc.LastError()
			if err := nc.Publish(subject, data); err != nil {
				return st, fmt.Errorf("asking to resume run %s: %w", run, err)
			}
			// A permission violation comes back asynchronously: a flush
			// round trip lets the connection's error handler see it.
			if err := nc.FlushWithContext(ctx); err != nil {
				return st, fmt.Errorf("asking to resume run %s: %w", run, err)
			}
			// The connection's last error, when this publish brought it
			// (a connection a library keeps may hold an older one).
			if err := nc.LastError(); err != nil && err != before {
				return st, fmt.Errorf("asking to resume run %s: %w", run, err)
			}
			asked = time.Now()
		}
		select {
		case <-ctx.Done():
			return st, fmt.Errorf("run %s: %w", run, ErrNotResumed)
		case <-tick.C:
		}
		if st, err = Get(ctx, js, subjects, run); err != nil {
			if ctx.Err() != nil {
				return st, fmt.Errorf("run %s: %w", run, ErrNotResumed)
			}
			return st, err
		}
		if st.Status != StatusParked {
			return st, nil
		}
	}
}

// Filter selects runs by their state: each field that is set must match.
type Filter struct {
	// Agent and Client are the served run's agent and submitting client.
	Agent, Client string
	// Status is a [State.Status]: running, finished, parked or
	// cancel_requested.
	Status string
	// OlderThan keeps runs started (first journaled) longer ago.
	OlderThan time.Duration
}

// Empty reports whether f selects every run.
func (f Filter) Empty() bool { return f == Filter{} }

// Match reports whether st passes f, at now.
func (f Filter) Match(st State, now time.Time) bool {
	return (f.Agent == "" || st.Agent == f.Agent) && (f.Client == "" || st.Client == f.Client) &&
		(f.Status == "" || st.Status == f.Status) && (f.OlderThan <= 0 || now.Sub(st.StartedAt) > f.OlderThan)
}

// Select returns the states of the runs with a journal that pass f.
func Select(ctx context.Context, js natsbus.JetStream, subjects protocol.Subjects, f Filter) ([]State, error) {
	all, err := List(ctx, js, subjects)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	out := all[:0]
	for _, st := range all {
		if f.Match(st, now) {
			out = append(out, st)
		}
	}
	return out, nil
}
