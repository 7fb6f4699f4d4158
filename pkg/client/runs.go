package client

import (
	"context"
	"errors"
	"fmt"

	"github.com/toolfleet/toolfleet/internal/runs"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// RunState is what a durable run's journal says about it: status
// ("running", "finished", "cancel_requested"), owner, round, pending calls
// and approvals, and whether its result is stored.
type RunState = runs.State

// ErrNoJournal is returned by [Client.ShowRun] for a run without a
// journal: unknown, or expired from the journal stream.
var ErrNoJournal = runs.ErrNoJournal

// ListRuns returns the state of every run with a journal, by run id (what
// "coordinator runs list" shows). It needs the operator's permissions.
func (c *Client) ListRuns(ctx context.Context) ([]RunState, error) {
	states, err := runs.List(ctx, c.js, c.subjects)
	if err != nil {
		return nil, fmt.Errorf("client: listing runs: %w", err)
	}
	return states, nil
}

// ShowRun returns one run's state, or an error wrapping [ErrNoJournal].
func (c *Client) ShowRun(ctx context.Context, run protocol.RunID) (RunState, error) {
	st, err := runs.Get(ctx, c.js, c.subjects, run)
	if err != nil && !errors.Is(err, ErrNoJournal) {
		err = fmt.Errorf("client: reading run %s: %w", run, err)
	}
	return st, err
}

// CancelRun asks the fleet to cancel run, naming who asks (by, required:
// a request without its author is refused here and ignored by the fleet)
// and why: the request is stored, so a coordinator that takes the run
// later cancels it too. The run's result says "cancelled". It needs the
// operator's or a coordinator's credential: a client's account imports no
// cancel subject.
func (c *Client) CancelRun(ctx context.Context, run protocol.RunID, by, reason string) error {
	if !run.Valid() {
		return fmt.Errorf("client: run id %q must match %s", run, protocol.TokenPattern)
	}
	if err := runs.Cancel(ctx, c.js, c.subjects, run, by, reason); err != nil {
		return fmt.Errorf("client: cancelling run %s: %w", run, err)
	}
	return nil
}
