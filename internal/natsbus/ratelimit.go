package natsbus

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// Fleet-wide rate limits per tool.
//
// A tool's limit is declared in its manifest ("rate_limit") or set by the
// operator ("coordinator tools limit", key limit.<tool> of the limits
// bucket, which then wins). Every worker serving the tool enforces it
// together through one shared token bucket in the limits bucket, key
// bucket.<tool>: a GCRA state (the theoretical arrival time, TAT) that a
// worker advances with a compare-and-set (a KV update expecting the
// revision it read) before a call starts. The server applies one update
// per revision, so however many workers serve the tool, every started call
// took one slot of the one bucket: at most Burst + Rate × t calls start in
// any t.
//
// Accuracy. The bucket is exact but for the clocks: each worker reads its
// own clock, so hosts whose clocks differ by δ may together start up to
// Rate × δ calls more (or fewer) than the limit. A worker that reserved a
// slot and crashed before the call started loses that slot: a crash only
// ever under-uses the limit. Under contention, a worker retries its
// compare-and-set (one more round trip per conflict; a worker serialises
// its own reservations per tool, so conflicts are between workers).
//
// Timing. A call waits for its turn at most rateLimitMaxWait (and half
// what its deadline leaves), without holding one of the worker's slots;
// past that it is answered rate_limited at once, with the time its turn
// would have come as the time to try again. Calls start at or after their
// turn: a worker short of slots may start one late, never early.
//
// Cost. A tool with no limit costs nothing per call: its limiter holds a
// nil limit, read atomically. A limited call costs one KV update (a
// publish and its ack) when the worker's cached revision is current, plus
// a KV get per conflict. Each worker reads every one of its tools' operator
// limits every limitRefresh, off the calls' path.

const (
	// TerminatedRateLimited is a call the tool's rate limit did not let
	// start within rateLimitMaxWait (or its deadline): answered
	// rate_limited, never run.
	TerminatedRateLimited = "rate_limited"

	// rateLimitMaxWait bounds how long a call waits for its turn under
	// the limit; past it (or past its deadline), it is answered
	// rate_limited with the time to try again.
	rateLimitMaxWait = 2 * time.Second
	// limitRefresh is how often a worker reads the operator's limits.
	limitRefresh = 2 * time.Second
	// maxReserveAttempts bounds the compare-and-set retries of one
	// reservation.
	maxReserveAttempts = 32
)

// Keys of the limits bucket.
func limitKey(tool protocol.ToolName) string  { return "limit." + string(tool) }
func bucketKey(tool protocol.ToolName) string { return "bucket." + string(tool) }

// errRateContended means a reservation lost its compare-and-set too often.
var errRateContended = errors.New("natsbus: rate limit bucket contended")

// rateLimiter is a worker's side of one tool's fleet-wide limit.
type rateLimiter struct {
	tool     protocol.ToolName
	declared protocol.RateLimit
	// limit is the limit in force, nil for none.
	limit atomic.Pointer[protocol.RateLimit]

	mu    sync.Mutex // one reservation at a time
	tat   int64      // the bucket's TAT (unix ns) at revision rev
	rev   uint64     // 0: not read yet
	known bool
}

func newRateLimiter(tool protocol.ToolName, declared protocol.RateLimit) *rateLimiter {
	l := &rateLimiter{tool: tool, declared: declared}
	l.set(nil)
	return l
}

// set puts the operator's limit (nil: none set) in force, or else the
// declared one.
func (l *rateLimiter) set(op *protocol.RateLimit) {
	lim := l.declared
	if op != nil {
		lim = *op
	}
	if !lim.Limited() {
		l.limit.Store(nil)
		return
	}
	l.limit.Store(&lim)
}

// current returns the limit in force, nil for none.
func (l *rateLimiter) current() *protocol.RateLimit {
	if l == nil {
		return nil
	}
	return l.limit.Load()
}

// reserve takes the next slot of the bucket if it comes within maxWait,
// and returns how long to wait for it. Otherwise it takes nothing and
// returns retryAfter > 0, when the next slot comes.
func (l *rateLimiter) reserve(ctx context.Context, kv jetstream.KeyValue, lim protocol.RateLimit, maxWait time.Duration) (wait, retryAfter time.Duration, err error) {
	interval := int64(float64(time.Second) / lim.Rate)
	burst := int64(max(lim.Burst, 1))
	key := bucketKey(l.tool)
	l.mu.Lock()
	defer l.mu.Unlock()
	for range maxReserveAttempts {
		if !l.known {
			if err := l.read(ctx, kv, key); err != nil {
				return 0, 0, err
			}
		}
		now := time.Now().UnixNano()
		base := max(l.tat, now)
		start := max(now, base-(burst-1)*interval)
		if d := time.Duration(start - now); d > maxWait {
			return 0, d, nil
		}
		next := strconv.AppendInt(nil, base+interval, 10)
		var rev uint64
		if l.rev == 0 {
			rev, err = kv.Create(ctx, key, next)
		} else {
			rev, err = kv.Update(ctx, key, next, l.rev)
		}
		if err == nil {
			l.tat, l.rev = base+interval, rev
			return time.Duration(start - now), 0, nil
		}
		if !casConflict(err) {
			l.known = false
			return 0, 0, err
		}
		l.known = false // another worker moved it: read it again
	}
	return 0, 0, errRateContended
}

// read loads the bucket's state.
func (l *rateLimiter) read(ctx context.Context, kv jetstream.KeyValue, key string) error {
	e, err := kv.Get(ctx, key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		l.tat, l.rev, l.known = 0, 0, true
		return nil
	case err != nil:
		return err
	}
	l.tat, l.rev, l.known = decodeTAT(e.Value(), time.Now().UnixNano()), e.Revision(), true
	return nil
}

// maxTATAhead bounds how far ahead of now a bucket's state may be: a
// reservation moves it at most rateLimitMaxWait plus one interval (at
// least 1ms at MaxRate, at most 1000s at the lowest rate) ahead of the
// reserving worker's clock.
const maxTATAhead = rateLimitMaxWait + 1000*time.Second + time.Minute

// decodeTAT reads a bucket's state: a decimal unix time in nanoseconds.
// Anything else — garbled, or further ahead of now than a reservation can
// put it (a writer with a wrong clock, or a hostile one) — reads as an
// empty bucket, which the next update overwrites: at worst one burst more
// than the limit, never a tool blocked for good.
func decodeTAT(data []byte, now int64) int64 {
	if len(data) == 0 || len(data) > 19 {
		return 0
	}
	tat, err := strconv.ParseInt(string(data), 10, 64)
	if err != nil || tat < 0 || tat > now+int64(maxTATAhead) {
		return 0
	}
	return tat
}

// casConflict reports whether err is a lost compare-and-set.
func casConflict(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence {
		return true
	}
	return errors.Is(err, jetstream.ErrKeyExists)
}

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
	t := time.NewTicker(limitRefresh)
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
		e, err := w.limitsKV.Get(cctx, limitKey(tc.name))
		cancel()
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted):
			tc.limiter.set(nil)
		case err != nil:
			if ctx.Err() == nil {
				w.limited.Warn().Err(err).Str(logTool, string(tc.name)).Msg("reading the tool's rate limit failed; keeping the last one")
			}
		default:
			lim, err := protocol.DecodeRateLimit(e.Value())
			if err != nil {
				w.limited.Warn().Str(logTool, string(tc.name)).Str(logCode, errorCode(err)).Msg("ignored a malformed rate limit")
				continue
			}
			tc.limiter.set(&lim)
		}
	}
}

// admit holds a call of a limited tool until the tool's fleet-wide limit
// lets it start. It reports done when the call must not run: it was
// answered rate_limited (its message terminated), or the worker stops.
func (w *Worker) admit(ctx context.Context, rec *callRecord, call protocol.Call, replyTo string, d *Delivery) (Decision, bool) {
	tc := rec.tc
	lim := tc.limiter.current()
	if lim == nil {
		return Decision{}, false
	}
	stop := d.Heartbeat(w.cfg.Heartbeat)
	defer stop()
	// At most rateLimitMaxWait, and half the time the deadline leaves: a
	// call that starts must have time to run.
	maxWait := min(rateLimitMaxWait, time.Until(call.Deadline)/2)
	var (
		wait, retry time.Duration
		err         = errors.New("natsbus: no rate limits bucket")
	)
	if w.limitsKV != nil {
		wait, retry, err = tc.limiter.reserve(ctx, w.limitsKV, *lim, maxWait)
	}
	if err != nil {
		// Fail closed: without the bucket the limit cannot be kept.
		retry = time.Second
	}
	if retry > 0 {
		rec.emit(CallEvent{Kind: CallTerminated, Reason: TerminatedRateLimited, Outcome: protocol.OutcomeRateLimited, RetryAfter: retry, Err: err})
		result := protocol.Result{
			V: protocol.Version, RunID: call.RunID, CallKey: call.CallKey, Outcome: protocol.OutcomeRateLimited,
			RetryAfterMS: max(retry.Milliseconds(), 1), Worker: w.cfg.Name, Attempt: d.Attempt,
		}
		if err := w.publishResult(ctx, replyTo, tc.name, &result, call.CallDeadline(), 0); err != nil {
			rec.emit(CallEvent{Kind: ResultFailed, Outcome: result.Outcome, Err: err})
			return Leave, true // redelivered after the ack wait, and answered then
		}
		return Term(TerminatedRateLimited), true
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
			return Nak(0), true
		}
	}
	return Decision{}, false
}

// String describes the limit in force, for logs.
func (l *rateLimiter) String() string {
	lim := l.current()
	if lim == nil {
		return "none"
	}
	return fmt.Sprintf("%g/s burst %d", lim.Rate, max(lim.Burst, 1))
}
