package protocol

import (
	"time"
)

// Defaults of a call's time bounds, shared by coordinators (pkg/loop),
// workers (internal/natsbus) and the harness.
const (
	// DefaultToolTimeout is a call's timeout when its tool declares none
	// ([ToolSpec].TimeoutMS 0) and the coordinator sets no override.
	DefaultToolTimeout = 30 * time.Second
	// DefaultCallGrace is how long past a call's deadline its result is
	// still awaited when the coordinator configures no grace of its own
	// ([CallDeadline].Grace 0, [Call].GraceMS 0).
	DefaultCallGrace = 500 * time.Millisecond
	// MaxCallGrace bounds a call's grace ([Call].GraceMS): a worker never
	// keeps a result waiting longer than this past the call's deadline.
	MaxCallGrace = time.Hour
)

// CallTimeout is how long a call of spec may take, queued time included:
// override when it is set (> 0), else the tool's own timeout, else
// [DefaultToolTimeout]. It is the one rule for a call's timeout.
func CallTimeout(spec *ToolSpec, override time.Duration) time.Duration {
	switch {
	case override > 0:
		return override
	case spec != nil && spec.Timeout() > 0:
		return spec.Timeout()
	default:
		return DefaultToolTimeout
	}
}

// CallDeadline answers "when does this call time out?" for every part
// that handles the call:
//
//   - the worker does not start a call at or past At ([CallDeadline.Expired]),
//     and the harness stops the tool at At;
//   - the coordinator waits for the call's result until At+Grace
//     ([CallDeadline.ResultBy]) and then answers timeout (or
//     outcome_unknown for a non-idempotent call a worker started);
//   - the worker retries publishing a result until the same ResultBy, past
//     which no coordinator reads it.
//
// The coordinator makes it ([NewCallDeadline]) and the call carries it on
// the wire ([Call].Deadline and [Call].GraceMS, read back by
// [Call.CallDeadline]; the [HeaderDeadline] header repeats At). Its zero
// Grace means [DefaultCallGrace].
type CallDeadline struct {
	// At is the call's absolute deadline.
	At time.Time
	// Grace is how long past At the call's result is still awaited.
	// 0: DefaultCallGrace.
	Grace time.Duration
}

// NewCallDeadline returns the deadline of a call that starts at now and
// may take timeout, with grace (0: [DefaultCallGrace]).
func NewCallDeadline(now time.Time, timeout, grace time.Duration) CallDeadline {
	return CallDeadline{At: now.Add(timeout), Grace: grace}
}

// GraceOrDefault returns d.Grace, or [DefaultCallGrace] when it is not set.
func (d CallDeadline) GraceOrDefault() time.Duration {
	if d.Grace <= 0 {
		return DefaultCallGrace
	}
	return d.Grace
}

// ResultBy is the end of the wait for the call's result: At plus the grace.
func (d CallDeadline) ResultBy() time.Time { return d.At.Add(d.GraceOrDefault()) }

// Expired reports whether the call may no longer start at now: whether At
// has come.
func (d CallDeadline) Expired(now time.Time) bool { return !now.Before(d.At) }

// Header is the value of the [HeaderDeadline] header for d: At in RFC 3339
// with nanoseconds, UTC.
func (d CallDeadline) Header() string { return d.At.UTC().Format(time.RFC3339Nano) }

// Tighten returns d with At moved to the [HeaderDeadline] header's value
// when the header is set and earlier, so a worker honours the earlier of
// the two deadlines a call message states. An unparseable header is an
// [Error] with code [CodeInvalidField].
func (d CallDeadline) Tighten(header string) (CallDeadline, error) {
	if header == "" {
		return d, nil
	}
	t, err := time.Parse(time.RFC3339Nano, header)
	if err != nil {
		return d, invalid(HeaderDeadline, "must be RFC 3339")
	}
	if t.Before(d.At) {
		d.At = t
	}
	return d, nil
}

// CallDeadline returns the deadline the call carries: Deadline, and
// GraceMS as the grace (0: [DefaultCallGrace]).
func (c *Call) CallDeadline() CallDeadline {
	return CallDeadline{At: c.Deadline, Grace: time.Duration(c.GraceMS) * time.Millisecond}
}

// SetCallDeadline stores d in the call: Deadline, and GraceMS, which stays 0
// (omitted on the wire) when d's grace is the default, so a call with the
// default grace encodes as it did before the field existed.
func (c *Call) SetCallDeadline(d CallDeadline) {
	c.Deadline = d.At
	c.GraceMS = 0
	if g := min(d.GraceOrDefault(), MaxCallGrace); g != DefaultCallGrace {
		c.GraceMS = max(g.Milliseconds(), 1)
	}
}
