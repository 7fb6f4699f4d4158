package client

import (
	"context"
	"fmt"
	"iter"
	"time"

	"github.com/toolfleet/toolfleet/internal/approval"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// ApprovalFilter selects the approval requests [Client.WatchApprovals]
// and [Client.WaitApproval] deliver. Its zero value selects every request.
type ApprovalFilter struct {
	// Run selects the requests of one run.
	Run protocol.RunID
	// Tool selects the requests of one tool's calls.
	Tool protocol.ToolName
	// Agent selects the requests of runs submitted to one agent
	// ([Request.Agent]; protocol.DefaultAgent for a run submitted to none).
	// The agent is read from each run's journal, once a run; a run without
	// one (not served, or its journal expired) is not selected.
	Agent string
	// Since starts the watch with the requests stored within Since before
	// it starts. Default: 0, every request the approvals stream holds (read
	// once, as [Client.Approvals] with 0 reads it).
	Since time.Duration
}

// WatchApprovals returns the open approval requests f selects: first
// those open when the watch starts, in the order they were stored, then
// each one as it is stored, until the loop over it stops or ctx ends
// (then it yields ctx's error, once, and ends). A request is open until
// its coordinator records how it settled or its deadline passes; a request
// stored again (a resumed run asking again) is delivered once.
//
//	for req, err := range c.WatchApprovals(ctx, client.ApprovalFilter{Tool: "refund"}) {
//		if err != nil {
//			return err
//		}
//		... c.Approve(ctx, req, client.Decision{Approver: "alice"}) ...
//	}
//
// It is served by one consumer on the approvals stream's request and
// outcome subjects, read once and then as messages are stored: nothing is
// polled or read again. It needs the operator's permissions (or a
// coordinator's): a client's account imports no approval subject. An
// error before the first request (a bad filter, no approvals stream, no
// permission) is the only thing yielded.
func (c *Client) WatchApprovals(ctx context.Context, f ApprovalFilter) iter.Seq2[ApprovalRequest, error] {
	return func(yield func(ApprovalRequest, error) bool) {
		wf, err := f.watchFilter()
		if err != nil {
			yield(ApprovalRequest{}, err)
			return
		}
		err = approval.Watch(ctx, c.js, c.subjects, wf, func(p approval.PendingRequest) bool {
			return yield(approvalRequest(p.ApprovalRequest, p.Sequence), nil)
		})
		if err != nil {
			yield(ApprovalRequest{}, fmt.Errorf("client: watching approvals: %w", err))
		}
	}
}

// WaitApproval waits for an open approval request that f selects and
// returns it: one already open when it is called, or else the next one
// stored — it returns when the request is stored, not before. It is the
// first request of [Client.WatchApprovals], with its permissions, and
// returns ctx's error (wrapped) if none comes before ctx ends.
func (c *Client) WaitApproval(ctx context.Context, f ApprovalFilter) (ApprovalRequest, error) {
	for req, err := range c.WatchApprovals(ctx, f) {
		return req, err
	}
	return ApprovalRequest{}, fmt.Errorf("client: waiting for an approval request: %w", context.Cause(ctx))
}

// watchFilter checks f and returns it as the approval package's.
func (f ApprovalFilter) watchFilter() (approval.WatchFilter, error) {
	switch {
	case f.Run != "" && !f.Run.Valid():
		return approval.WatchFilter{}, fmt.Errorf("client: ApprovalFilter.Run %q must match %s", f.Run, protocol.TokenPattern)
	case f.Tool != "" && !f.Tool.Valid():
		return approval.WatchFilter{}, fmt.Errorf("client: ApprovalFilter.Tool %q must match %s", f.Tool, protocol.TokenPattern)
	case f.Agent != "" && !protocol.ValidToken(f.Agent):
		return approval.WatchFilter{}, fmt.Errorf("client: ApprovalFilter.Agent %q must match %s", f.Agent, protocol.TokenPattern)
	case f.Since < 0:
		return approval.WatchFilter{}, fmt.Errorf("client: ApprovalFilter.Since must be >= 0, got %v", f.Since)
	}
	wf := approval.WatchFilter{Run: f.Run, Tool: f.Tool, Agent: f.Agent}
	if f.Since > 0 {
		wf.Since = time.Now().Add(-f.Since)
	}
	return wf, nil
}
