package loop

import (
	"bytes"
	"context"
	"errors"
	"time"

	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// approval is one gate answer.
type approval struct {
	i       int
	d       Decision
	err     error
	expired bool // the gate answered after deadline+grace
}

// approve is a round's second phase (docs/design.md §4, step 4): it asks
// the gate about every valid call that needs approval, all at once, and
// answers the calls it does not approve. It never waits past the approval
// deadline plus twice the grace, even for a gate that ignores its context.
func (ru *run) approve(ctx context.Context, round int, calls []roundCall) {
	var waiting []int
	for i := range calls {
		if !calls[i].done && calls[i].approval {
			waiting = append(waiting, i)
		}
	}
	if len(waiting) == 0 {
		return
	}
	gate := ru.r.gate
	if gate == nil || ctx.Err() != nil {
		for _, i := range waiting {
			c := &calls[i]
			if gate == nil {
				ru.answerApprovalUnavailable(c, "no_gate")
			} else {
				ru.answerCancelled(c)
			}
		}
		return
	}
	timeout := ru.cfg.ApprovalTimeout
	// A resumed wait keeps its deadline and the decisions journaled.
	deadline, waiting, ok := ru.j.approvalsRequested(ctx, round, calls, waiting, ru.cfg.Now().Add(timeout))
	if !ok {
		return
	}
	// A hand-off ends the gate's wait with cause ErrHandedOff: the request
	// is still pending, for the next owner.
	gctx, gcancel := context.WithCancelCause(ctx)
	defer gcancel(nil)
	ch := make(chan approval, len(waiting))
	open := make(map[int]bool, len(waiting))
	for _, i := range waiting {
		c := &calls[i]
		digest, err := protocol.Digest(ru.id, c.key, c.entry.spec.Name, c.args)
		if err != nil {
			ru.answerApprovalUnavailable(c, "digest_error")
			continue
		}
		req := protocol.ApprovalRequest{
			V: protocol.Version, RunID: ru.id, CallKey: c.key, CallID: protocol.CallID(c.id), Round: round,
			Tool: c.entry.spec.Name, Arguments: bytes.Clone(c.args), Digest: digest, Deadline: deadline,
		}
		open[i] = true
		ru.callEvent(round, c, CallAwaitingApproval)
		go func() {
			actx, cancel := context.WithDeadline(gctx, deadline.Add(ru.cfg.Grace))
			defer cancel()
			d, err := gate.Approve(actx, req)
			ch <- approval{i: i, d: d, err: err, expired: errors.Is(actx.Err(), context.DeadlineExceeded)}
		}()
	}
	backstop := time.NewTimer(deadline.Sub(ru.cfg.Now()) + 2*ru.cfg.Grace)
	defer backstop.Stop()
	for len(open) > 0 {
		select {
		case a := <-ch:
			delete(open, a.i)
			ru.applyDecision(ctx, &calls[a.i], a, timeout)
			if !ru.j.approvalDecided(ctx, &calls[a.i]) {
				return
			}
		case <-backstop.C:
			for i := range open {
				c := &calls[i]
				ru.answerApprovalExpired(c, "no_answer", timeout)
				if !ru.j.approvalDecided(ctx, c) {
					return
				}
			}
			return
		case <-ru.handoff:
			_ = ru.j.checkpoint() // the run stops: it records ErrHandedOff
			gcancel(ErrHandedOff)
			return
		case <-ctx.Done():
			for i := range open {
				ru.answerCancelled(&calls[i])
			}
			return
		}
	}
}
