package approval

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

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
	notes     map[string]Note
	skipped   []string // why messages were skipped, for stderr
	truncated bool
}

func ledgerID(run protocol.RunID, key protocol.CallKey) string { return run + "." + key }

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
func scanLedger(ctx context.Context, js jetstream.JetStream, subjects protocol.Subjects, filters []string, since time.Time) (*ledger, error) {
	l := &ledger{
		requests:  map[string]*pending{},
		decisions: map[string][]protocol.ApprovalDecision{},
		notes:     map[string]Note{},
	}
	name := subjects.ApprovalsStream()
	st, err := js.Stream(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("approvals stream %s: %w", name, err)
	}
	info := st.CachedInfo()
	if info.State.Msgs == 0 {
		return l, nil
	}
	last := info.State.LastSeq
	if len(filters) == 0 {
		filters = []string{subjects.Approvals()}
	}
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: filters, InactiveThreshold: 10 * time.Second}
	if !since.IsZero() {
		cfg.DeliverPolicy = jetstream.DeliverByStartTimePolicy
		cfg.OptStartTime = &since
	}
	cons, err := js.OrderedConsumer(ctx, name, cfg)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", name, err)
	}
	cinfo, err := cons.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", name, err)
	}
	defer func() {
		// Best effort: the server removes it after InactiveThreshold anyway.
		_ = js.DeleteConsumer(context.WithoutCancel(ctx), name, cons.CachedInfo().Name)
	}()
	if cinfo.NumPending == 0 {
		return l, nil
	}
	wait := 2 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		wait = max(min(time.Until(dl), wait), 100*time.Millisecond)
	}
	// Ask for exactly what is pending so a fetch never waits for more.
	pendingMsgs := cinfo.NumPending
	for n := 0; ; {
		batch, err := cons.Fetch(int(min(pendingMsgs, 256)), jetstream.FetchMaxWait(wait))
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", name, err)
		}
		got := 0
		done := false
		for m := range batch.Messages() {
			got++
			n++
			meta, err := m.Metadata()
			if err != nil {
				return nil, fmt.Errorf("reading %s: %w", name, err)
			}
			l.add(subjects, m.Subject(), m.Data(), meta.Sequence.Stream, meta.Timestamp)
			pendingMsgs = meta.NumPending
			if meta.Sequence.Stream >= last || meta.NumPending == 0 {
				done = true
			}
			if n >= maxScan {
				l.truncated, done = true, true
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) && !errors.Is(err, context.DeadlineExceeded) {
			return nil, fmt.Errorf("reading %s: %w", name, err)
		}
		if done || got == 0 {
			return l, ctx.Err()
		}
	}
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
		req, err := protocol.DecodeApprovalRequest(data, maxStoredRequestBytes)
		if err != nil {
			l.skipped = append(l.skipped, fmt.Sprintf("request %s (seq %d): undecodable: %v", id, seq, err))
			return
		}
		if req.RunID != run || req.CallKey != key {
			l.skipped = append(l.skipped, fmt.Sprintf("request %s (seq %d): body names another call", id, seq))
			return
		}
		digest, err := protocol.Digest(req.RunID, req.CallKey, req.Tool, req.Arguments)
		if err != nil || digest != req.Digest {
			l.skipped = append(l.skipped, fmt.Sprintf("request %s (seq %d): digest does not match its arguments", id, seq))
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
		if n, err := DecodeNote(data); err == nil && n.RunID == run && n.CallKey == key {
			l.notes[id] = n
		}
	}
}

// splitApprovalSubject splits <prefix>.approval.<kind>.<run>.<key>.
func splitApprovalSubject(subjects protocol.Subjects, subj string) (kind, run, key string, ok bool) {
	rest, found := strings.CutPrefix(subj, strings.TrimSuffix(subjects.Approvals(), ">"))
	if !found {
		return "", "", "", false
	}
	parts := strings.Split(rest, ".")
	if len(parts) != 3 || !validToken(parts[1]) || !validToken(parts[2]) {
		return "", "", "", false
	}
	return parts[0], parts[1], parts[2], true
}
