package loop

import (
	"bytes"
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// errBatchShort answers a call a [BatchDispatcher] returned no error for.
var errBatchShort = errors.New("loop: the dispatcher answered fewer calls than it was given")

// publishResult is one publish's answer.
type publishResult struct {
	i   int
	err error
}

// dispatch is a round's third phase (docs/design.md §4, step 5): it
// publishes every call still open (valid, and approved where needed),
// concurrently, and waits until the fleet stored them. It returns the
// calls to gather, by key; a call whose publish failed is answered here.
// ok false: the run stops (its journal failed or it was handed off).
func (ru *run) dispatch(ctx context.Context, round int, calls []roundCall) (pending map[protocol.CallKey]*roundCall, ok bool) {
	var todo []int
	for i := range calls {
		if !calls[i].done {
			todo = append(todo, i)
		}
	}
	if len(todo) == 0 {
		return nil, true
	}
	if ctx.Err() != nil {
		for _, i := range todo {
			ru.answerCancelled(&calls[i])
		}
		return nil, true
	}
	if !ru.openInbox(ctx, round) {
		for _, i := range todo {
			ru.failDispatch(ctx, &calls[i])
		}
		return nil, true
	}
	// The calls' deadlines are set, and journaled before the first
	// publish; a resumed round takes them from the journal and publishes
	// only the calls it must.
	for _, i := range todo {
		c := &calls[i]
		c.timeout = protocol.CallTimeout(&c.entry.spec, ru.cfg.ToolTimeout)
		c.deadline = protocol.NewCallDeadline(ru.cfg.Now(), c.timeout, ru.cfg.Grace)
	}
	rr, ok := ru.j.dispatched(ctx, round, calls, todo)
	if !ok {
		return nil, false
	}

	ch := make(chan publishResult, len(todo))
	open := make(map[int]bool, len(todo))
	pending = make(map[protocol.CallKey]*roundCall, len(todo))
	var last time.Time
	outs := make([]Outgoing, 0, len(todo))
	outIdx := make([]int, 0, len(todo))
	for _, i := range todo {
		c := &calls[i]
		if by := c.deadline.ResultBy(); by.After(last) {
			last = by
		}
		ru.keys[c.key] = keyOpen
		if rr != nil && rr.await[c.key] {
			pending[c.key] = c
			continue
		}
		open[i] = true
		ru.callQueued(round, c)
		outs = append(outs, ru.outgoing(ctx, round, c))
		outIdx = append(outIdx, i)
	}
	ru.publish(ctx, last, outs, outIdx, len(todo) > 1, ch)

	// Wait for every publish, but never past the last deadline plus grace:
	// a publish that has not returned by then is treated as published (its
	// result, if any, is still gathered) and answered timeout.
	backstop := time.NewTimer(last.Sub(ru.cfg.Now()))
	defer backstop.Stop()
	interrupted := false
wait:
	for len(open) > 0 {
		select {
		case p := <-ch:
			delete(open, p.i)
			c := &calls[p.i]
			if p.err != nil {
				ru.log.Warn().Str(logKeyEvent, evDispatchFailed).Str(logKeyDropReason, "publish_failed").
					Str(logKeyCallKey, string(c.key)).Str(logKeyErrorType, errType(p.err)).Int(logKeyRound, round).Send()
				ru.failDispatch(ctx, c)
				continue
			}
			pending[c.key] = c
		case <-backstop.C:
			interrupted = true
			break wait
		case <-ctx.Done():
			interrupted = true
			break wait
		case <-ru.handoff:
			_ = ru.j.checkpoint() // the run stops: it records ErrHandedOff
			return nil, false
		}
	}
	for i := range open {
		pending[calls[i].key] = &calls[i]
	}
	if !ru.j.published(ctx, round, rr, interrupted) {
		return nil, false
	}
	return pending, true
}

// openInbox opens the run's inbox, once, before its first publish.
func (ru *run) openInbox(ctx context.Context, round int) bool {
	if ru.inbox != nil {
		return true
	}
	inbox, err := ru.r.disp.Open(ru.progressContext(ctx), ru.id)
	if err != nil || inbox == nil {
		ru.log.Warn().Str(logKeyEvent, evDispatchFailed).Str(logKeyDropReason, "open_failed").
			Str(logKeyErrorType, errType(err)).Int(logKeyRound, round).Send()
		return false
	}
	ru.inbox = inbox
	return true
}

// outgoing is the publish of c, with its facts: at most once when the
// catalog says the call's tool is not idempotent.
func (ru *run) outgoing(ctx context.Context, round int, c *roundCall) Outgoing {
	call := protocol.Call{
		V: protocol.Version, RunID: ru.id, Round: round, CallKey: c.key, CallID: protocol.CallID(c.id),
		Tool: c.entry.spec.Name, Arguments: bytes.Clone(c.args), Attempt: 1,
		MaxOutputChars:   ru.cfg.MaxObservationChars,
		RequiresApproval: c.approval, Approval: c.proof,
	}
	call.SetCallDeadline(c.deadline)
	o := Outgoing{Call: call, AtMostOnce: !c.entry.spec.Idempotent, StartedNotices: ru.startedNotices}
	if c.span != nil {
		o.Trace = c.span.SpanContext()
	}
	return o
}

// publish hands outs to the dispatcher without waiting: as one batch when
// the round has several calls and the dispatcher can, else each on its
// own, under the call's deadline. Each answer goes to ch, with its call's
// index from idx.
func (ru *run) publish(ctx context.Context, last time.Time, outs []Outgoing, idx []int, several bool, ch chan<- publishResult) {
	if len(outs) == 0 {
		return
	}
	if batcher, ok := ru.r.disp.(BatchDispatcher); ok && several {
		// One goroutine for the round: the dispatcher writes every call
		// and then waits for their acknowledgements together.
		go func() {
			bctx, cancel := context.WithDeadline(ctx, last)
			defer cancel()
			errs := batcher.PublishBatch(bctx, outs)
			for k, i := range idx {
				err := errBatchShort
				if k < len(errs) {
					err = errs[k]
				}
				ch <- publishResult{i: i, err: err}
			}
		}()
		return
	}
	for k, o := range outs {
		go func() {
			pctx := ctx
			if o.Trace.IsValid() {
				pctx = trace.ContextWithSpanContext(ctx, o.Trace)
			}
			pctx, cancel := context.WithDeadline(pctx, o.Call.Deadline)
			defer cancel()
			ch <- publishResult{i: idx[k], err: ru.r.disp.Publish(pctx, o)}
		}()
	}
}
