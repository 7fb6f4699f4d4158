package approval

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natsbus/stores"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// Errors of [Decide].
var (
	// ErrNoRequest: the approvals stream holds no request for the call.
	ErrNoRequest = errors.New("approval: no approval request for the call")
	// ErrExpired: the request's deadline passed; the call did not run.
	ErrExpired = errors.New("approval: the request expired; the call did not run")
	// ErrSettled: the request was already approved or denied.
	ErrSettled = errors.New("approval: the request is already settled")
	// ErrNoOutcome: the decision is stored, but no coordinator recorded
	// that it acted on it within the wait.
	ErrNoOutcome = errors.New("approval: no coordinator recorded an outcome")
)

// PendingRequest is an open approval request and its sequence in the
// approvals stream.
type PendingRequest struct {
	protocol.ApprovalRequest
	Sequence uint64
}

// Pending lists the open requests (neither settled nor expired) stored
// since since (the whole stream when zero), earliest deadline first.
func Pending(ctx context.Context, js natsbus.JetStream, subjects protocol.Subjects, since time.Time) ([]PendingRequest, error) {
	l, err := List(ctx, stores.NewApprovalLedger(js, subjects), subjects, since, time.Now())
	if err != nil {
		return nil, err
	}
	var open []PendingRequest
	for _, s := range l.Open {
		open = append(open, PendingRequest{ApprovalRequest: s.ApprovalRequest, Sequence: s.Sequence})
	}
	return open, nil
}

// Decide approves or denies the pending request of run's call key, as
// approver, for reason (required to deny), and waits up to wait (0: not at
// all) for the coordinator to record the outcome, which it returns.
func Decide(ctx context.Context, js natsbus.JetStream, subjects protocol.Subjects, run protocol.RunID, key protocol.CallKey,
	approve bool, approver, reason string, wait time.Duration) (string, error) {
	reqSubj, err := subjects.ApprovalRequest(run, key)
	if err != nil {
		return "", err
	}
	decSubj, _ := subjects.ApprovalDecision(run, key)
	outSubj, _ := subjects.ApprovalOutcome(run, key)
	switch {
	case !approve && reason == "":
		return "", &protocol.Error{Code: protocol.CodeMissingField, Field: "reason", Msg: "is required to deny"}
	case len(reason) > protocol.MaxReasonLen:
		return "", &protocol.Error{Code: protocol.CodeInvalidField, Field: "reason", Msg: "too long"}
	case len(approver) > 128:
		return "", &protocol.Error{Code: protocol.CodeInvalidField, Field: "approver", Msg: "longer than 128 bytes"}
	}
	approvals := stores.NewApprovalLedger(js, subjects)
	l, err := scanLedger(ctx, approvals, subjects, []string{reqSubj, decSubj, outSubj}, time.Time{})
	if err != nil {
		return "", err
	}
	id := ledgerID(run, key)
	p := l.requests[id]
	switch {
	case p == nil:
		return "", fmt.Errorf("run %s key %s: %w", run, key, ErrNoRequest)
	case !time.Now().Before(p.req.Deadline):
		return "", fmt.Errorf("run %s key %s: %w", run, key, ErrExpired)
	}
	if how, done := l.settled(id); done {
		return "", fmt.Errorf("run %s key %s: %w (%s)", run, key, ErrSettled, how)
	}
	data, err := json.Marshal(protocol.ApprovalDecision{V: protocol.Version, Digest: p.req.Digest, Approved: &approve, Reason: reason, Approver: approver})
	if err != nil {
		return "", err
	}
	if _, err := approvals.Publish(ctx, &nats.Msg{Subject: decSubj, Data: data}, ""); err != nil {
		return "", fmt.Errorf("publishing the decision: %w", err)
	}
	if wait == 0 {
		return "", nil
	}
	note, ok := WaitOutcome(ctx, approvals, outSubj, wait)
	switch {
	case !ok:
		return "", fmt.Errorf("run %s key %s: %w within %v", run, key, ErrNoOutcome, wait)
	case note.Digest != p.req.Digest:
		return "", errors.New("approval: the coordinator recorded an outcome for other arguments")
	}
	return note.Outcome, nil
}
