package client

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/toolfleet/toolfleet/internal/approval"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// Errors of [Client.Approve] and [Client.Deny].
var (
	// ErrNoApprovalRequest: no request for the call is stored.
	ErrNoApprovalRequest = approval.ErrNoRequest
	// ErrApprovalExpired: the request's deadline passed; the call did
	// not run.
	ErrApprovalExpired = approval.ErrExpired
	// ErrApprovalSettled: the request was already approved or denied.
	ErrApprovalSettled = approval.ErrSettled
	// ErrNoOutcome: the decision is stored, but no coordinator recorded
	// acting on it within the wait (is the run still waiting?).
	ErrNoOutcome = approval.ErrNoOutcome
)

// ApprovalRequest is an open request for a human's approval of one call,
// as a coordinator stored it in the approvals stream. Everything in it but
// Sequence was written by the coordinator that runs the call; Arguments are
// the model's, and untrusted.
type ApprovalRequest struct {
	// RunID is the run the call belongs to.
	RunID protocol.RunID
	// CallKey names the call within its run: what a decision names.
	CallKey protocol.CallKey
	// CallID is the model's tool_call_id of the call (empty in a request
	// of an older coordinator).
	CallID protocol.CallID
	// Round is the loop round the model made the call in, from 1.
	Round int
	// Tool is the tool the call would run.
	Tool protocol.ToolName
	// Arguments are the exact arguments the call runs with if approved,
	// as the model wrote them (JSON, not canonicalised).
	Arguments json.RawMessage
	// Digest binds a decision to this call: run id, call key, tool and
	// canonical arguments ([protocol.Digest]). [Client.Approve] echoes it.
	Digest string
	// Deadline is when the request expires: a decision after it does
	// not count, and the call does not run.
	Deadline time.Time
	// Sequence is the request's sequence in the approvals stream: its
	// place in the audit log.
	Sequence uint64
}

// approvalRequest is the public form of a stored request.
func approvalRequest(r protocol.ApprovalRequest, seq uint64) ApprovalRequest {
	return ApprovalRequest{RunID: r.RunID, CallKey: r.CallKey, CallID: r.CallID, Round: r.Round, Tool: r.Tool,
		Arguments: r.Arguments, Digest: r.Digest, Deadline: r.Deadline, Sequence: seq}
}

// Decision is how an operator answers an [ApprovalRequest].
type Decision struct {
	// Approver names who decides; it is kept in the audit log.
	Approver string
	// Reason says why; it reaches the model. Required to deny.
	Reason string
	// Wait bounds how long to wait for the coordinator to record the
	// outcome; 0 means 3s, a negative value not at all.
	Wait time.Duration
}

// Approvals lists the pending approval requests stored within since (0:
// the whole approvals stream), earliest deadline first. It needs the
// operator's permissions.
func (c *Client) Approvals(ctx context.Context, since time.Duration) ([]ApprovalRequest, error) {
	var from time.Time
	if since > 0 {
		from = time.Now().Add(-since)
	}
	pending, err := approval.Pending(ctx, c.js, c.subjects, from)
	if err != nil {
		return nil, fmt.Errorf("client: listing approvals: %w", err)
	}
	reqs := make([]ApprovalRequest, len(pending))
	for i, p := range pending {
		reqs[i] = approvalRequest(p.ApprovalRequest, p.Sequence)
	}
	return reqs, nil
}

// Approve approves req's call and returns the outcome the coordinator
// recorded ("approved"), or an error wrapping one of the errors above.
func (c *Client) Approve(ctx context.Context, req ApprovalRequest, d Decision) (string, error) {
	return c.decide(ctx, req.RunID, req.CallKey, true, d)
}

// Deny denies req's call (d.Reason is required) and returns the outcome
// the coordinator recorded ("denied").
func (c *Client) Deny(ctx context.Context, req ApprovalRequest, d Decision) (string, error) {
	return c.decide(ctx, req.RunID, req.CallKey, false, d)
}

func (c *Client) decide(ctx context.Context, run protocol.RunID, key protocol.CallKey, approve bool, d Decision) (string, error) {
	wait := d.Wait
	switch {
	case wait == 0:
		wait = 3 * time.Second
	case wait < 0:
		wait = 0
	}
	outcome, err := approval.Decide(ctx, c.js, c.subjects, run, key, approve, d.Approver, d.Reason, wait)
	if err != nil {
		return "", fmt.Errorf("client: %w", err)
	}
	return outcome, nil
}
