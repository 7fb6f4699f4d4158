package workerbus

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natsbus/admission"
	"github.com/toolfleet/toolfleet/internal/natsbus/workqueue"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// openLimits opens the limits bucket and reads the operator's limits once;
// then refreshLimits keeps them current. A worker without the bucket (a
// fleet provisioned before it existed) enforces the manifests' limits only
// where it can: a limited call is then answered rate_limited.
func (w *Worker) openLimits(ctx context.Context) {
	cctx, cancel := context.WithTimeout(ctx, consumerTimeout)
	defer cancel()
	kv, err := w.js.KeyValue(cctx, w.subjects.LimitsBucket())
	if err != nil {
		w.log.Warn().Err(err).Str("bucket", w.subjects.LimitsBucket()).
			Msg("no rate limits bucket: operator limits are not applied, and calls of a tool with a declared limit are answered rate_limited (run coordinator provision)")
		return
	}
	w.limitsKV = kv
	w.readLimits(ctx)
}

// refreshLimits reads the operator's limits every limitRefresh until ctx
// ends.
func (w *Worker) refreshLimits(ctx context.Context) {
	if w.limitsKV == nil {
		return
	}
	t := time.NewTicker(admission.LimitRefresh)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			w.readLimits(ctx)
		}
	}
}

// readLimits reads each tool's operator limit; a tool whose read fails
// keeps the limit it had.
func (w *Worker) readLimits(ctx context.Context) {
	for _, tc := range w.tools {
		cctx, cancel := context.WithTimeout(ctx, consumerTimeout)
		e, err := w.limitsKV.Get(cctx, admission.LimitKey(tc.name))
		cancel()
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted):
			tc.limiter.Set(nil)
		case err != nil:
			if ctx.Err() == nil {
				w.limited.Warn().Err(err).Str(natsbus.LogTool, string(tc.name)).Msg("reading the tool's rate limit failed; keeping the last one")
			}
		default:
			lim, err := protocol.DecodeRateLimit(e.Value())
			if err != nil {
				w.limited.Warn().Str(natsbus.LogTool, string(tc.name)).Str(natsbus.LogCode, natsbus.ErrorCode(err)).Msg("ignored a malformed rate limit")
				continue
			}
			tc.limiter.Set(&lim)
		}
	}
}

// admit holds a call of a limited tool until the tool's fleet-wide limit
// lets it start. It reports done when the call must not run: it was
// answered rate_limited (its message terminated), or the worker stops.
func (w *Worker) admit(ctx context.Context, rec *callRecord, call protocol.Call, replyTo string, d *workqueue.Delivery) (workqueue.Decision, bool) {
	tc := rec.tc
	lim := tc.limiter.Current()
	if lim == nil {
		return workqueue.Decision{}, false
	}
	stop := d.Heartbeat(w.cfg.Heartbeat)
	defer stop()
	// At most rateLimitMaxWait, and half the time the deadline leaves: a
	// call that starts must have time to run.
	maxWait := min(admission.RateLimitMaxWait, time.Until(call.Deadline)/2)
	var (
		wait, retry time.Duration
		err         = errors.New("natsbus: no rate limits bucket")
	)
	if w.limitsKV != nil {
		wait, retry, err = tc.limiter.Reserve(ctx, w.limitsKV, *lim, maxWait)
	}
	if err != nil {
		// Fail closed: without the bucket the limit cannot be kept.
		retry = time.Second
	}
	if retry > 0 {
		rec.emit(CallEvent{Kind: CallTerminated, Reason: admission.TerminatedRateLimited, Outcome: protocol.OutcomeRateLimited, RetryAfter: retry, Err: err})
		result := protocol.Result{
			V: protocol.Version, RunID: call.RunID, CallKey: call.CallKey, Outcome: protocol.OutcomeRateLimited,
			RetryAfterMS: max(retry.Milliseconds(), 1), Worker: w.cfg.Name, Attempt: d.Attempt,
		}
		if err := w.publishResult(ctx, replyTo, tc.name, &result, call.CallDeadline(), 0); err != nil {
			rec.emit(CallEvent{Kind: ResultFailed, Outcome: result.Outcome, Err: err})
			return workqueue.Leave, true // redelivered after the ack wait, and answered then
		}
		return workqueue.Term(admission.TerminatedRateLimited), true
	}
	if wait > 0 {
		// The wait holds no slot: other tools' calls (and this tool's
		// calls that are over the limit, answered at once) keep being
		// served. At most Rate × rateLimitMaxWait + Burst calls wait,
		// fleet-wide. The slot is taken back before the call runs, which
		// may start it later than its turn, never earlier.
		w.sem.Release(1)
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
		_ = w.sem.Acquire(context.WithoutCancel(ctx), 1) // the work queue gives it back
		if ctx.Err() != nil {
			return workqueue.Nak(0), true
		}
	}
	return workqueue.Decision{}, false
}
