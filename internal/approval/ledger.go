package approval

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/toolfleet/toolfleet/internal/natsbus/stores"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// maxStoredRequestBytes bounds a request read back from the stream: NATS
// itself never carries more than 64 MiB.
const maxStoredRequestBytes = 64 << 20

// maxScan bounds how many stream messages one command reads.
const maxScan = 200_000

// pending is one approval request read from the stream.
type pending struct {
	req    protocol.ApprovalRequest
	args   string // canonical arguments, made safe to print
	seq    uint64
	stored time.Time
}

// ledger is what the approvals stream says about some calls.
type ledger struct {
	requests  map[string]*pending // by run.key
	order     []string            // request ids in stream order
	decisions map[string][]protocol.ApprovalDecision
	notes     map[string]protocol.ApprovalNote
	skipped   []string // why messages were skipped, for stderr
	truncated bool
}

func ledgerID(run protocol.RunID, key protocol.CallKey) string {
	return string(run) + "." + string(key)
}

// settled reports whether id has an outcome note or a valid decision, and
// describes it.
func (l *ledger) settled(id string) (string, bool) {
	if n, ok := l.notes[id]; ok {
		s := n.Outcome
		if n.Approver != "" {
			s += " by " + displayText(n.Approver, 64)
		}
		return s + " at " + n.At.UTC().Format(time.RFC3339), true
	}
	p := l.requests[id]
	for _, d := range l.decisions[id] {
		if p != nil && d.Digest == p.req.Digest {
			s := "denied"
			if *d.Approved {
				s = "approved"
			}
			if d.Approver != "" {
				s += " by " + displayText(d.Approver, 64)
			}
			return s + " (decision published)", true
		}
	}
	return "", false
}

// scanLedger reads the approvals stream on filters (all of it when empty),
// from since (the beginning when zero) up to the last message stored when
// the scan starts.
func scanLedger(ctx context.Context, approvals *stores.ApprovalLedger, subjects protocol.Subjects, filters []string, since time.Time) (*ledger, error) {
	l := &ledger{
		requests:  map[string]*pending{},
		decisions: map[string][]protocol.ApprovalDecision{},
		notes:     map[string]protocol.ApprovalNote{},
	}
	truncated, err := approvals.Scan(ctx, filters, since, maxScan, func(m stores.ApprovalMsg) {
		l.add(subjects, m.Subject, m.Data, m.Seq, m.Stored)
	})
	l.truncated = truncated
	if err != nil {
		return nil, err
	}
	return l, nil
}

// pendingChunk bounds the requests whose decisions and outcomes one read
// of the stream asks for (two filter subjects each).
const pendingChunk = 128

// scanPending reads what the pending requests need, however much else the
// approvals stream holds: the requests stored since since (the beginning
// when zero), and then, of those whose deadline is after now, only their
// own decisions and outcomes (consumers filtered on exactly those
// subjects, from when the earliest of the requests was stored). Nothing
// else — decisions of expired requests, junk, a flood on other subjects —
// is read, nor counts against maxScan.
func scanPending(ctx context.Context, approvals *stores.ApprovalLedger, subjects protocol.Subjects, since, now time.Time) (*ledger, error) {
	l, err := scanLedger(ctx, approvals, subjects, []string{subjects.ApprovalRequests()}, since)
	if err != nil {
		return nil, err
	}
	var open []string
	for _, id := range l.order {
		if now.Before(l.requests[id].req.Deadline) {
			open = append(open, id)
		}
	}
	for len(open) > 0 {
		chunk := open[:min(len(open), pendingChunk)]
		open = open[len(chunk):]
		filters := make([]string, 0, 2*len(chunk))
		var from time.Time
		for i, id := range chunk {
			p := l.requests[id]
			dec, err := subjects.ApprovalDecision(p.req.RunID, p.req.CallKey)
			if err != nil {
				return nil, err
			}
			out, err := subjects.ApprovalOutcome(p.req.RunID, p.req.CallKey)
			if err != nil {
				return nil, err
			}
			filters = append(filters, dec, out)
			if i == 0 || p.stored.Before(from) {
				from = p.stored
			}
		}
		truncated, err := approvals.Scan(ctx, filters, from, maxScan, func(m stores.ApprovalMsg) {
			l.add(subjects, m.Subject, m.Data, m.Seq, m.Stored)
		})
		if err != nil {
			return nil, err
		}
		l.truncated = l.truncated || truncated
	}
	return l, nil
}

// add files one stream message into l.
func (l *ledger) add(subjects protocol.Subjects, subj string, data []byte, seq uint64, stored time.Time) {
	kind, run, key, ok := splitApprovalSubject(subjects, subj)
	if !ok {
		return
	}
	id := ledgerID(run, key)
	switch kind {
	case "request":
		req, why := decodeRequest(run, key, data)
		if why != "" {
			l.skipped = append(l.skipped, fmt.Sprintf("request %s (seq %d): %s", id, seq, why))
			return
		}
		canon, _ := protocol.Canonical(req.Arguments) // Digest succeeded, so this does
		if _, seen := l.requests[id]; !seen {
			l.order = append(l.order, id)
		}
		l.requests[id] = &pending{req: req, args: displayJSON(string(canon)), seq: seq, stored: stored}
	case "decision":
		d, err := protocol.DecodeApprovalDecision(data, maxDecisionBytes)
		if err == nil {
			l.decisions[id] = append(l.decisions[id], d)
		}
	case "outcome":
		if n, err := protocol.DecodeApprovalNote(data); err == nil && n.RunID == run && n.CallKey == key {
			l.notes[id] = n
		}
	}
}

// decodeRequest decodes a request stored on run's key's request subject,
// or says why it is none: undecodable, naming another call, or with a
// digest that is not its arguments'.
func decodeRequest(run protocol.RunID, key protocol.CallKey, data []byte) (protocol.ApprovalRequest, string) {
	req, err := protocol.DecodeApprovalRequest(data, maxStoredRequestBytes)
	if err != nil {
		return req, fmt.Sprintf("undecodable: %v", err)
	}
	if req.RunID != run || req.CallKey != key {
		return req, "body names another call"
	}
	digest, err := protocol.Digest(req.RunID, req.CallKey, req.Tool, req.Arguments)
	if err != nil || digest != req.Digest {
		return req, "digest does not match its arguments"
	}
	return req, ""
}

// splitApprovalSubject splits <prefix>.approval.<kind>.<run>.<key>.
func splitApprovalSubject(subjects protocol.Subjects, subj string) (kind string, run protocol.RunID, key protocol.CallKey, ok bool) {
	rest, found := strings.CutPrefix(subj, strings.TrimSuffix(subjects.Approvals(), ">"))
	if !found {
		return "", "", "", false
	}
	parts := strings.Split(rest, ".")
	if len(parts) != 3 {
		return "", "", "", false
	}
	run, err := protocol.ParseRunID(parts[1])
	if err != nil {
		return "", "", "", false
	}
	key, err = protocol.ParseCallKey(parts[2])
	if err != nil {
		return "", "", "", false
	}
	return parts[0], run, key, true
}
