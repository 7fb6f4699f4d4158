// Package approvalproof finds and checks the evidence that an operator
// approved a call: the approval request and the first valid decision for it
// in the approvals stream. The coordinator's gate uses it to name the
// decision it acted on ([FirstDecision]); a worker uses it to check, on its
// own, that a call which needs approval really was approved ([Verify]), so
// that whoever can publish calls still cannot run a call no operator
// approved.
//
// What counts is only what the stream holds: the request is the message at
// the proof's request sequence, on the call's request subject (which only
// coordinators may publish to), with the call's digest; the decision is the
// first message on the call's decision subject (which only operators may
// publish to) after the request whose digest matches; it must say
// approved, be stored before the request's deadline and sit at the proof's
// decision sequence. A message the server stored there as its answer to
// somebody's direct get (one carrying the headers a direct get adds) is
// never a request nor a decision, whatever it says.
package approvalproof

import (
	"context"
	"crypto/subtle"
	"errors"
	"time"

	"github.com/toolfleet/toolfleet/internal/natsbus/streammsg"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// Bounds of what is read from the stream.
const (
	// MaxScan bounds the decisions examined after a request before the
	// first valid one: junk decisions beyond it make the proof fail.
	MaxScan = 256
	// maxRequestBytes bounds a stored request on decode.
	maxRequestBytes = 4 << 20
	// maxDecisionBytes bounds a stored decision on decode.
	maxDecisionBytes = 8 << 10
)

// Error is a proof that does not hold, by code. Errors compare with
// errors.Is by code.
type Error struct{ Code string }

func (e *Error) Error() string { return "approvalproof: " + e.Code }

// Is matches another *Error with the same code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// The ways a proof fails. Any of them means the call does not run.
var (
	ErrMissing          = &Error{"missing"}            // no proof at all
	ErrRequestNotFound  = &Error{"request_not_found"}  // nothing at the request sequence
	ErrRequestMismatch  = &Error{"request_mismatch"}   // not this call's request
	ErrDecisionNotFound = &Error{"decision_not_found"} // no valid decision after the request
	ErrNotFirst         = &Error{"not_first_decision"} // another valid decision came first
	ErrNotApproved      = &Error{"not_approved"}       // the first valid decision denies
	ErrLate             = &Error{"late"}               // stored at or after the request's deadline
	ErrStale            = &Error{"stale"}              // the call runs too long after the approval
	ErrTooManyDecisions = &Error{"too_many_decisions"} // MaxScan junk decisions
)

// Decision is a decision as stored in the approvals stream.
type Decision struct {
	protocol.ApprovalDecision
	// Seq is its stream sequence.
	Seq uint64
	// Stored is when the server stored it.
	Stored time.Time
}

// FirstDecision returns the first decision on subject stored after
// afterSeq that decodes and carries digest. It returns ErrDecisionNotFound
// when there is none (yet), ErrTooManyDecisions after MaxScan others.
func FirstDecision(ctx context.Context, st streammsg.Stream, subject, digest string, afterSeq uint64) (Decision, error) {
	seq := afterSeq + 1
	for range MaxScan {
		m, err := streammsg.Get(ctx, st, seq, subject)
		if errors.Is(err, streammsg.ErrNotFound) {
			return Decision{}, ErrDecisionNotFound
		}
		if err != nil {
			return Decision{}, err
		}
		if m.Subject == subject && !m.Reflected {
			d, err := protocol.DecodeApprovalDecision(m.Data, maxDecisionBytes)
			if err == nil && subtle.ConstantTimeCompare([]byte(d.Digest), []byte(digest)) == 1 {
				return Decision{ApprovalDecision: d, Seq: m.Sequence, Stored: m.Time}, nil
			}
		}
		seq = m.Sequence + 1
	}
	return Decision{}, ErrTooManyDecisions
}

// Verify checks that call carries a proof of an operator's approval that
// holds in st, the approvals stream of subjects. maxAge bounds how long
// after the decision the call's deadline may be (a proof is for one run of
// the call, not for later ones). It returns nil only when every check
// passes; otherwise one of the Err values or the stream's error.
func Verify(ctx context.Context, st streammsg.Stream, subjects protocol.Subjects, call protocol.Call, maxAge time.Duration) error {
	p := call.Approval
	if p == nil || p.RequestSeq == 0 || p.DecisionSeq <= p.RequestSeq {
		return ErrMissing
	}
	reqSubj, err := subjects.ApprovalRequest(call.RunID, call.CallKey)
	if err != nil {
		return ErrRequestMismatch
	}
	decSubj, err := subjects.ApprovalDecision(call.RunID, call.CallKey)
	if err != nil {
		return ErrRequestMismatch
	}
	digest, err := protocol.Digest(call.RunID, call.CallKey, call.Tool, call.Arguments)
	if err != nil {
		return ErrRequestMismatch
	}
	m, err := streammsg.Get(ctx, st, p.RequestSeq, "")
	switch {
	case errors.Is(err, streammsg.ErrNotFound):
		return ErrRequestNotFound
	case err != nil:
		return err
	}
	if m.Subject != reqSubj || m.Reflected {
		return ErrRequestMismatch
	}
	req, err := protocol.DecodeApprovalRequest(m.Data, maxRequestBytes)
	if err != nil || req.RunID != call.RunID || req.CallKey != call.CallKey || req.Tool != call.Tool ||
		subtle.ConstantTimeCompare([]byte(req.Digest), []byte(digest)) != 1 {
		return ErrRequestMismatch
	}
	d, err := FirstDecision(ctx, st, decSubj, digest, p.RequestSeq)
	if err != nil {
		return err
	}
	switch {
	case d.Approved == nil || !*d.Approved:
		return ErrNotApproved
	case d.Seq != p.DecisionSeq:
		return ErrNotFirst
	case !d.Stored.Before(req.Deadline):
		return ErrLate
	case call.Deadline.After(d.Stored.Add(maxAge)):
		return ErrStale
	}
	return nil
}
