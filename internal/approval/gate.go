package approval

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/internal/approvalproof"
	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natsbus/stores"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// Gate asks operators over NATS whether a call may run. It is safe for
// concurrent use: every Approve reads the decisions with its own consumer
// and nothing is shared between calls.
type Gate struct {
	nc        *nats.Conn
	approvals *stores.ApprovalLedger
	subjects  protocol.Subjects
	cfg       GateConfig
}

var _ loop.Gate = (*Gate)(nil)

// NewGate returns a gate that publishes requests with js into the approvals
// stream (which must exist: natsbus.EnsureStreams creates it) and reads the
// decisions stored there. nc and js must use the same connection.
func NewGate(nc *nats.Conn, js natsbus.JetStream, subjects protocol.Subjects, cfg GateConfig) *Gate {
	return &Gate{nc: nc, approvals: stores.NewApprovalLedger(js, subjects), subjects: subjects, cfg: cfg.withDefaults()}
}

// Approve publishes req and blocks until the first valid decision, req's
// deadline or the end of ctx. It fills req.DecisionSubject, and req.Digest
// and req.V when they are empty; a digest that is set must match the call.
//
// An approval returns Decision{Approved: true}; a denial returns the
// operator's reason; the deadline returns Decision{Expired: true}. Any
// failure to ask or to wait — an invalid request, NATS unreachable, the
// connection closed, ctx ended — returns an error, and the call must not run.
func (g *Gate) Approve(ctx context.Context, req protocol.ApprovalRequest) (loop.Decision, error) {
	if err := ctx.Err(); err != nil {
		return loop.Decision{}, fmt.Errorf("approval: %w", err)
	}
	reqSubj, decSubj, err := g.prepare(&req)
	if err != nil {
		return loop.Decision{}, err
	}
	data, err := protocol.Encode(&req)
	if err != nil {
		return loop.Decision{}, fmt.Errorf("approval: encoding request: %w", err)
	}
	if len(data) > g.cfg.MaxMessageBytes {
		return loop.Decision{}, fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, len(data), g.cfg.MaxMessageBytes)
	}
	log := g.cfg.Logger.With().Str(logRun, string(req.RunID)).Str(logKey, string(req.CallKey)).Str(logTool, string(req.Tool)).Logger()

	start := g.cfg.Now()
	remaining := req.Deadline.Sub(start)
	if remaining <= 0 {
		log.Info().Str(logOutcome, protocol.NoteExpired).Msg("approval deadline passed before the request was published")
		return loop.Decision{Expired: true}, nil
	}

	// Decisions are read from the approvals stream, from its first
	// decision for the call: one sent while this coordinator was down or
	// reconnecting, or before a resumed run asked again, is found.
	waitCtx, cancel := context.WithTimeout(ctx, remaining)
	defer cancel()
	it, err := g.approvals.WatchDecisions(waitCtx, decSubj, maxPendingDecisions)
	if err != nil {
		return loop.Decision{}, fmt.Errorf("approval: reading decisions: %w", err)
	}
	defer it.Stop()

	msg := nats.NewMsg(reqSubj)
	msg.Data = data
	msg.Header.Set(protocol.HeaderVersion, "1")
	msg.Header.Set(protocol.HeaderDeadline, req.Deadline.UTC().Format(time.RFC3339Nano))
	reqSeq, err := g.approvals.Publish(waitCtx, msg, RequestMsgID(req.CallKey))
	if err != nil {
		if ctx.Err() != nil {
			// The request may be stored already: say it was withdrawn.
			g.withdraw(ctx, req, log)
			return loop.Decision{}, fmt.Errorf("approval: publishing request: %w", ctx.Err())
		}
		return loop.Decision{}, fmt.Errorf("approval: publishing request: %w", err)
	}
	log.Info().Msg("approval requested")

	for {
		data, storedAt, err := it.Next(waitCtx)
		switch {
		case err == nil:
		case ctx.Err() != nil:
			g.withdraw(ctx, req, log)
			return loop.Decision{}, fmt.Errorf("approval: waiting for a decision: %w", ctx.Err())
		case waitCtx.Err() != nil:
			log.Info().Str(logOutcome, protocol.NoteExpired).Dur(logWaited, g.cfg.Now().Sub(start)).Msg("approval expired")
			g.record(ctx, req, protocol.ApprovalNote{Outcome: protocol.NoteExpired}, log)
			return loop.Decision{Expired: true}, nil
		default:
			return loop.Decision{}, fmt.Errorf("approval: waiting for a decision: %w", err)
		}

		at := g.cfg.Now()
		if !storedAt.IsZero() {
			at = storedAt // when the server stored it, not when it is read
		}
		d, reason := g.check(&req, data, at)
		var proof *protocol.ApprovalProof
		if reason == "" {
			// What counts is what the stream holds, as workers check it:
			// the first valid decision stored after the request.
			var stored approvalproof.Decision
			stored, proof, err = g.stored(waitCtx, decSubj, &req, reqSeq)
			switch {
			case err == nil:
				d = stored.ApprovalDecision
				if !stored.Stored.Before(req.Deadline) {
					reason = ignoreLate
				}
			case ctx.Err() != nil:
				g.withdraw(ctx, req, log)
				return loop.Decision{}, fmt.Errorf("approval: waiting for a decision: %w", ctx.Err())
			case waitCtx.Err() != nil:
				reason = ignoreLate
			default:
				return loop.Decision{}, fmt.Errorf("approval: reading the decision back: %w", err)
			}
		}
		if reason != "" {
			log.Warn().Str(logReason, reason).Msg("approval decision ignored")
			if reason == ignoreLate {
				log.Info().Str(logOutcome, protocol.NoteExpired).Dur(logWaited, g.cfg.Now().Sub(start)).Msg("approval expired")
				g.record(ctx, req, protocol.ApprovalNote{Outcome: protocol.NoteExpired}, log)
				return loop.Decision{Expired: true}, nil
			}
			continue
		}
		// First valid decision: stop reading before anything else, so a
		// second decision cannot be seen.
		it.Stop()
		note := protocol.ApprovalNote{Outcome: protocol.NoteDenied, Approver: d.Approver, Reason: d.Reason}
		if *d.Approved {
			note.Outcome = protocol.NoteApproved
		}
		log.Info().Str(logOutcome, note.Outcome).Str(logApprover, d.Approver).
			Dur(logWaited, g.cfg.Now().Sub(start)).Msg("approval decided")
		g.record(ctx, req, note, log)
		if *d.Approved {
			return loop.Decision{Approved: true, Approver: d.Approver, Reason: d.Reason, Proof: proof}, nil
		}
		return loop.Decision{Reason: d.Reason, Approver: d.Approver}, nil
	}
}

// stored returns the first valid decision for req stored in the approvals
// stream after the request (at reqSeq), and the proof naming it. A decision
// seen on the subject may not be stored yet: it retries until ctx ends.
func (g *Gate) stored(ctx context.Context, decSubj string, req *protocol.ApprovalRequest, reqSeq uint64) (approvalproof.Decision, *protocol.ApprovalProof, error) {
	st, err := g.approvals.Stream(ctx)
	if err != nil {
		return approvalproof.Decision{}, nil, err
	}
	for wait := time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		d, err := approvalproof.FirstDecision(ctx, st, decSubj, req.Digest, reqSeq)
		if err == nil {
			return d, &protocol.ApprovalProof{RequestSeq: reqSeq, DecisionSeq: d.Seq}, nil
		}
		if !errors.Is(err, approvalproof.ErrDecisionNotFound) {
			return approvalproof.Decision{}, nil, err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return approvalproof.Decision{}, nil, ctx.Err()
		case <-t.C:
		}
	}
}

// prepare checks req, fills its defaults and returns its request and decision
// subjects.
func (g *Gate) prepare(req *protocol.ApprovalRequest) (reqSubj, decSubj string, err error) {
	if req.V == 0 {
		req.V = protocol.Version
	}
	if reqSubj, err = g.subjects.ApprovalRequest(req.RunID, req.CallKey); err != nil {
		return "", "", fmt.Errorf("approval: %w", err)
	}
	if decSubj, err = g.subjects.ApprovalDecision(req.RunID, req.CallKey); err != nil {
		return "", "", fmt.Errorf("approval: %w", err)
	}
	req.DecisionSubject = decSubj
	digest, err := protocol.Digest(req.RunID, req.CallKey, req.Tool, req.Arguments)
	if err != nil {
		return "", "", fmt.Errorf("approval: digest of the arguments: %w", err)
	}
	switch {
	case req.Digest == "":
		req.Digest = digest
	case req.Digest != digest:
		return "", "", ErrDigestMismatch
	}
	if err := req.Validate(); err != nil {
		return "", "", fmt.Errorf("approval: %w", err)
	}
	return reqSubj, decSubj, nil
}

// check returns the decision in data if it counts for req, or a reason code
// saying why it does not.
func (g *Gate) check(req *protocol.ApprovalRequest, data []byte, at time.Time) (protocol.ApprovalDecision, string) {
	d, err := protocol.DecodeApprovalDecision(data, g.cfg.decisionLimit())
	switch {
	case errors.Is(err, protocol.ErrTooLarge):
		return d, ignoreTooLarge
	case err != nil:
		return d, ignoreMalformed
	case subtle.ConstantTimeCompare([]byte(d.Digest), []byte(req.Digest)) != 1:
		return d, ignoreDigest
	case !at.Before(req.Deadline) || !g.cfg.Now().Before(req.Deadline):
		return d, ignoreLate
	}
	return d, ""
}

// withdraw records that the run stopped waiting for req, unless it was
// handed off to another coordinator, which waits for the same request.
func (g *Gate) withdraw(ctx context.Context, req protocol.ApprovalRequest, log zerolog.Logger) {
	if errors.Is(context.Cause(ctx), loop.ErrHandedOff) {
		log.Info().Msg("approval wait handed off: the request stays pending")
		return
	}
	g.record(ctx, req, protocol.ApprovalNote{Outcome: protocol.NoteCancelled}, log)
}

// record publishes how the gate settled req into the approvals stream. It is
// best effort: a failure is logged and changes nothing about the decision.
func (g *Gate) record(ctx context.Context, req protocol.ApprovalRequest, n protocol.ApprovalNote, log zerolog.Logger) {
	subj, err := g.subjects.ApprovalOutcome(req.RunID, req.CallKey)
	if err != nil {
		return // cannot happen: the request's tokens were checked
	}
	n.V, n.RunID, n.CallKey, n.Tool, n.Digest, n.At = protocol.Version, req.RunID, req.CallKey, req.Tool, req.Digest, g.cfg.Now().UTC()
	data, err := protocol.EncodeApprovalNote(&n)
	if err != nil {
		return
	}
	if !g.nc.IsConnected() {
		log.Warn().Str(logReason, "disconnected").Msg("approval outcome not recorded")
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.cfg.NoteTimeout)
	defer cancel()
	if _, err := g.approvals.Publish(ctx, &nats.Msg{Subject: subj, Data: data}, OutcomeMsgID(req.CallKey)); err != nil {
		log.Warn().Str(logReason, "publish_failed").Msg("approval outcome not recorded")
	}
}

// RequestMsgID is the JetStream dedup id of the approval request of key.
func RequestMsgID(key protocol.CallKey) string { return "approval-request-" + string(key) }

// OutcomeMsgID is the JetStream dedup id of the outcome note of key.
func OutcomeMsgID(key protocol.CallKey) string { return "approval-outcome-" + string(key) }
