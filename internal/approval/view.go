package approval

import (
	"context"
	"slices"
	"time"

	"github.com/toolfleet/toolfleet/internal/natsbus/stores"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// MaxScan bounds how many stream messages one read of the approvals
// stream ([List], [Lookup]) reads.
const MaxScan = maxScan

// Shown is a stored approval request as an operator's terminal shows it.
type Shown struct {
	protocol.ApprovalRequest
	// Args are the request's canonical arguments, made safe to print
	// (displayJSON): what the tool receives, with nothing hidden.
	Args string
	// Sequence is the request's sequence in the approvals stream.
	Sequence uint64
}

// Listing is what the approvals stream holds open.
type Listing struct {
	// Open are the requests neither settled nor expired, earliest deadline
	// first.
	Open []Shown
	// Skipped says why messages were passed over (undecodable, naming
	// another call, a digest not of their arguments).
	Skipped []string
	// Truncated: the read stopped after MaxScan messages.
	Truncated bool
}

// List returns the requests stored since since (the whole stream when
// zero) that are open at now: neither settled nor expired.
func List(ctx context.Context, approvals *stores.ApprovalLedger, subjects protocol.Subjects, since, now time.Time) (*Listing, error) {
	l, err := scanPending(ctx, approvals, subjects, since, now)
	if err != nil {
		return nil, err
	}
	out := &Listing{Skipped: l.skipped, Truncated: l.truncated}
	for _, id := range l.order {
		p := l.requests[id]
		if _, done := l.settled(id); done || !now.Before(p.req.Deadline) {
			continue
		}
		out.Open = append(out.Open, Shown{ApprovalRequest: p.req, Args: p.args, Sequence: p.seq})
	}
	slices.SortStableFunc(out.Open, func(a, b Shown) int { return a.Deadline.Compare(b.Deadline) })
	return out, nil
}

// Call is what the approvals stream says about one call's request.
type Call struct {
	// Request is the stored request; nil when the stream holds none.
	Request *Shown
	// Settled says how the request was settled ("approved by alice (decision
	// published)"); empty while it is open.
	Settled string
	// Skipped says why messages were passed over.
	Skipped []string
}

// Lookup reads the request, decisions and outcome of run's call key.
func Lookup(ctx context.Context, approvals *stores.ApprovalLedger, subjects protocol.Subjects, run protocol.RunID, key protocol.CallKey) (*Call, error) {
	reqSubj, err := subjects.ApprovalRequest(run, key)
	if err != nil {
		return nil, err
	}
	decSubj, _ := subjects.ApprovalDecision(run, key)
	outSubj, _ := subjects.ApprovalOutcome(run, key)
	l, err := scanLedger(ctx, approvals, subjects, []string{reqSubj, decSubj, outSubj}, time.Time{})
	if err != nil {
		return nil, err
	}
	c := &Call{Skipped: l.skipped}
	id := ledgerID(run, key)
	if p := l.requests[id]; p != nil {
		c.Request = &Shown{ApprovalRequest: p.req, Args: p.args, Sequence: p.seq}
		c.Settled, _ = l.settled(id)
	}
	return c, nil
}

// WaitOutcome waits up to wait for the outcome note on subj (a
// coordinator's record that it acted on a decision), reading the stream's
// last message on it every 50ms.
func WaitOutcome(ctx context.Context, approvals *stores.ApprovalLedger, subj string, wait time.Duration) (protocol.ApprovalNote, bool) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if data, err := approvals.LastOn(ctx, subj); err == nil {
			if n, err := protocol.DecodeApprovalNote(data); err == nil {
				return n, true
			}
		}
		select {
		case <-ctx.Done():
			return protocol.ApprovalNote{}, false
		case <-tick.C:
		}
	}
}
