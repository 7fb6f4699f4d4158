package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/toolfleet/toolfleet/internal/runs"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// RunState is what a durable run's journal says about it, as "coordinator
// runs show" prints it.
type RunState struct {
	// RunID is the run's id.
	RunID protocol.RunID `json:"run_id"`
	// Status is "running" (an owner is at it, or it waits for one),
	// "finished", "parked" (its model failed after its retries: no
	// coordinator owns it until [Client.ResumeRun]), or
	// "cancel_requested" while a cancel is on its way.
	Status string `json:"status"`
	// ParkReason says why a parked run parked (the model's HTTP status
	// and error type, never what its server wrote).
	ParkReason string `json:"park_reason,omitempty"`
	// Client and Agent are a served run's submitting client and agent.
	Client string `json:"client,omitempty"`
	Agent  string `json:"agent,omitempty"`
	// StartedAt is when the run's first journal entry was stored.
	StartedAt time.Time `json:"started_at"`
	// Termination is the loop's termination reason once finished; empty
	// before.
	Termination loop.TerminationReason `json:"termination,omitempty"`
	// Owner is the coordinator that took the run last.
	Owner string `json:"owner,omitempty"`
	// Owners counts the coordinators that took the run: 1 when it was
	// never resumed by another.
	Owners int `json:"owners"`
	// Round is the last round with a journaled model response.
	Round int `json:"round"`
	// PendingCalls are the calls of the last round dispatched and not yet
	// answered.
	PendingCalls []loop.JournaledCall `json:"pending_calls,omitempty"`
	// PendingApprovals are the calls waiting for a human's decision.
	PendingApprovals []loop.JournaledCall `json:"pending_approvals,omitempty"`
	// ApprovalDeadline is when the pending approvals expire; zero when
	// none is pending.
	ApprovalDeadline time.Time `json:"approval_deadline,omitzero"`
	// LastStep is the kind of the journal's last entry (a loop.Entry*
	// kind, or "owner" or "request").
	LastStep string `json:"last_step"`
	// LastAt is when the last entry was stored.
	LastAt time.Time `json:"last_at"`
	// Entries counts the journal's entries.
	Entries int `json:"entries"`
	// HasResult says whether the runs bucket holds the run's result.
	HasResult bool `json:"has_result"`
}

// runState is the public form of st.
func runState(st runs.State) RunState {
	return RunState{RunID: st.RunID, Status: st.Status, ParkReason: st.ParkReason, Client: st.Client, Agent: st.Agent,
		StartedAt: st.StartedAt, Termination: st.Termination, Owner: st.Owner, Owners: st.Owners,
		Round: st.Round, PendingCalls: st.PendingCalls, PendingApprovals: st.PendingApprovals,
		ApprovalDeadline: st.ApprovalDeadline, LastStep: st.LastStep, LastAt: st.LastAt, Entries: st.Entries, HasResult: st.HasResult}
}

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
	out := make([]RunState, len(states))
	for i, st := range states {
		out[i] = runState(st)
	}
	return out, nil
}

// ShowRun returns one run's state, or an error wrapping [ErrNoJournal].
func (c *Client) ShowRun(ctx context.Context, run protocol.RunID) (RunState, error) {
	st, err := runs.Get(ctx, c.js, c.subjects, run)
	if err != nil {
		if !errors.Is(err, ErrNoJournal) {
			err = fmt.Errorf("client: reading run %s: %w", run, err)
		}
		return RunState{}, err
	}
	return runState(st), nil
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

// ErrNotParked is returned by [Client.ResumeRun] for a run that is not
// parked (running, finished, or resumed already).
var ErrNotParked = runs.ErrNotParked

// ErrNotResumed is returned by [Client.ResumeRun] when no serving
// coordinator took the run before ctx ended.
var ErrNotResumed = runs.ErrNotResumed

// ResumeRun resumes a parked run (status "parked": its model failed after
// its retries), naming who asks (by, required) and why: a serving
// coordinator submits the run again, and whichever coordinator takes it
// continues it from its journal — no completed call runs again, the round
// whose model failed asks the model again. ResumeRun waits until a
// coordinator took the run, or ctx ends ([ErrNotResumed]; give ctx a
// deadline), and returns its state then. A run that is not parked is
// [ErrNotParked]. It needs the operator's credential: the server refuses
// anyone else's request (an error from ResumeRun, and nothing resumed).
// The run's result, once it ends, replaces its parked result.
func (c *Client) ResumeRun(ctx context.Context, run protocol.RunID, by, reason string) (RunState, error) {
	if !run.Valid() {
		return RunState{}, fmt.Errorf("client: run id %q must match %s", run, protocol.TokenPattern)
	}
	st, err := runs.Resume(ctx, c.nc, c.js, c.subjects, run, by, reason)
	if err != nil {
		return runState(st), fmt.Errorf("client: resuming run %s: %w", run, err)
	}
	return runState(st), nil
}

// ErrInputRefused is wrapped by the error of [Client.Enqueue] or
// [Client.Interrupt] when the server or the run's coordinator refused the
// input; the error says why.
var ErrInputRefused = runs.ErrInputRefused

// ErrNotRunning is returned by [Client.Enqueue] and [Client.Interrupt]
// when no coordinator runs the run now: it ended, waits to be taken
// (parked, or between two coordinators), or is not this client's.
var ErrNotRunning = runs.ErrNotRunning

// Enqueue adds a user message to this client's run in flight: the model
// sees it at the run's next step, after the round in flight is answered
// as it would be. It returns once the coordinator running the run took it
// (it is journaled before it takes effect), or ctx ends ([ErrNotRunning];
// give ctx a deadline). A message a run takes while it is ending is not
// seen by its model: the run's result says what the model saw.
func (c *Client) Enqueue(ctx context.Context, run protocol.RunID, text string) error {
	return c.input(ctx, run, protocol.RunInputEnqueue, text)
}

// Interrupt is [Client.Enqueue] that interrupts the run's round in
// flight first: each of its calls not yet published, and each
// non-idempotent one no worker has claimed, is withdrawn and answered
// "interrupted" (it never runs); any other call keeps its rule (its
// result; outcome_unknown for a non-idempotent one whose worker went
// silent). An idempotent call already published is awaited. Then the model sees every call answered and
// the message.
func (c *Client) Interrupt(ctx context.Context, run protocol.RunID, text string) error {
	return c.input(ctx, run, protocol.RunInputInterrupt, text)
}

func (c *Client) input(ctx context.Context, run protocol.RunID, mode, text string) error {
	if !run.Valid() {
		return fmt.Errorf("client: run id %q must match %s", run, protocol.TokenPattern)
	}
	if err := runs.Input(ctx, c.nc, c.subjects, c.name, run, mode, text); err != nil {
		return fmt.Errorf("client: input to run %s: %w", run, err)
	}
	return nil
}
