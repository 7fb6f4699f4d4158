package admission

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

	// RateLimitMaxWait bounds how long a call waits for its turn under
	// the limit; past it (or past its deadline), it is answered
	// rate_limited with the time to try again.
	RateLimitMaxWait = 2 * time.Second
	// LimitRefresh is how often a worker reads the operator's limits.
	LimitRefresh = 2 * time.Second
	// maxReserveAttempts bounds the compare-and-set retries of one
	// reservation.
	maxReserveAttempts = 32
)

// Keys of the limits bucket.
func LimitKey(tool protocol.ToolName) string { return "limit." + string(tool) }

func bucketKey(tool protocol.ToolName) string { return "bucket." + string(tool) }

// errRateContended means a reservation lost its compare-and-set too often.
var errRateContended = errors.New("natsbus: rate limit bucket contended")

// RateLimiter is a worker's side of one tool's fleet-wide limit.
type RateLimiter struct {
	tool     protocol.ToolName
	declared protocol.RateLimit
	// limit is the limit in force, nil for none.
	limit atomic.Pointer[protocol.RateLimit]

	mu    sync.Mutex // one reservation at a time
	tat   int64      // the bucket's TAT (unix ns) at revision rev
	rev   uint64     // 0: not read yet
	known bool
}

// NewRateLimiter returns tool's limiter, at its declared limit until the
// operator's limits bucket says otherwise.
func NewRateLimiter(tool protocol.ToolName, declared protocol.RateLimit) *RateLimiter {
	l := &RateLimiter{tool: tool, declared: declared}
	l.Set(nil)
	return l
}

// Set puts the operator's limit (nil: none set) in force, or else the
// declared one.
func (l *RateLimiter) Set(op *protocol.RateLimit) {
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

// Current returns the limit in force, nil for none.
func (l *RateLimiter) Current() *protocol.RateLimit {
	if l == nil {
		return nil
	}
	return l.limit.Load()
}

// Reserve takes the next slot of the bucket if it comes within maxWait,
// and returns how long to wait for it. Otherwise it takes nothing and
// returns retryAfter > 0, when the next slot comes.
func (l *RateLimiter) Reserve(ctx context.Context, kv jetstream.KeyValue, lim protocol.RateLimit, maxWait time.Duration) (wait, retryAfter time.Duration, err error) {
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
func (l *RateLimiter) read(ctx context.Context, kv jetstream.KeyValue, key string) error {
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
const maxTATAhead = RateLimitMaxWait + 1000*time.Second + time.Minute

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

// String describes the limit in force, for logs.
func (l *RateLimiter) String() string {
	lim := l.Current()
	if lim == nil {
		return "none"
	}
	return fmt.Sprintf("%g/s burst %d", lim.Rate, max(lim.Burst, 1))
}
