package stores

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natsbus/streammsg"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// ApprovalLedger reads and writes the approvals stream: the requests
// coordinators publish, the decisions operators publish and the outcome
// notes coordinators record. It is what the approval gate and the
// "approvals" command know of JetStream. It is safe for concurrent use.
type ApprovalLedger struct {
	js       jetstream.JetStream
	subjects protocol.Subjects

	mu     sync.Mutex
	stream jetstream.Stream // looked up once
}

// NewApprovalLedger returns the ledger of the approvals stream of subjects
// (which must exist: [EnsureStreams] creates it), read and written with js.
func NewApprovalLedger(js natsbus.JetStream, subjects protocol.Subjects) *ApprovalLedger {
	return &ApprovalLedger{js: js, subjects: subjects}
}

// Publish stores msg in the approvals stream, with msgID as its dedup id
// unless it is empty, and returns its stream sequence. The ack says the
// message is in the audit log; it reaches subscribers of its subject like
// any core message.
func (l *ApprovalLedger) Publish(ctx context.Context, msg *nats.Msg, msgID string) (uint64, error) {
	opts := []jetstream.PublishOpt{jetstream.WithExpectStream(l.subjects.ApprovalsStream())}
	if msgID != "" {
		opts = []jetstream.PublishOpt{jetstream.WithMsgID(msgID), opts[0]}
	}
	ack, err := l.js.PublishMsg(ctx, msg, opts...)
	if err != nil {
		return 0, err
	}
	return ack.Sequence, nil
}

// Stream returns the approvals stream, looked up once, for reading stored
// messages by sequence ([streammsg.Get]).
func (l *ApprovalLedger) Stream(ctx context.Context) (streammsg.Stream, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stream != nil {
		return l.stream, nil
	}
	st, err := l.js.Stream(ctx, l.subjects.ApprovalsStream())
	if err != nil {
		return nil, err
	}
	l.stream = st
	return st, nil
}

// LastOn returns the data of the last message stored on subject. A
// message the server stored there as its answer to a direct get
// ([streammsg.Reflected]) is nobody's: it returns an error.
func (l *ApprovalLedger) LastOn(ctx context.Context, subject string) ([]byte, error) {
	st, err := l.Stream(ctx)
	if err != nil {
		return nil, err
	}
	m, err := streammsg.Last(ctx, st, subject)
	if err != nil {
		return nil, err
	}
	if m.Reflected {
		return nil, errors.New("natsbus: the last message on the subject is a reflected direct get")
	}
	return m.Data, nil
}

// DecisionWatch delivers the messages stored on one subject of the
// approvals stream, from the first, and then those stored later.
type DecisionWatch struct {
	w *natsbus.StreamWatch
}

// WatchDecisions starts reading the messages on subject (a call's decision
// subject) from the first one stored, with at most maxPending buffered.
// ctx bounds the setup. Stop the watch when done.
func (l *ApprovalLedger) WatchDecisions(ctx context.Context, subject string, maxPending int) (*DecisionWatch, error) {
	w, err := natsbus.WatchStream(ctx, l.js, l.subjects.ApprovalsStream(), []string{subject}, time.Time{}, maxPending)
	if err != nil {
		return nil, err
	}
	return &DecisionWatch{w: w}, nil
}

// Next returns the next message's data and when the server stored it. It
// blocks until one comes, ctx ends or the watch stops. A message stored
// with the headers of a direct get's answer (the server's answer to
// somebody's direct get, reflected there: [streammsg.Reflected]) is
// skipped: it is nobody's decision.
func (w *DecisionWatch) Next(ctx context.Context) (data []byte, stored time.Time, err error) {
	for {
		m, err := w.w.Next(ctx)
		if err != nil {
			return nil, time.Time{}, err
		}
		if !m.Reflected {
			return m.Data, m.Stored, nil
		}
	}
}

// Stop ends the watch; no message is delivered after it returns. It may be
// called more than once.
func (w *DecisionWatch) Stop() { w.w.Stop() }

// ApprovalMsg is one message of the approvals stream, as [ApprovalLedger.Scan]
// reads it.
type ApprovalMsg struct {
	Subject string
	Data    []byte
	Seq     uint64
	// Stored is when the server stored it.
	Stored time.Time
}

// Scan reads the approvals stream on filters (all of it when empty), from
// since (the beginning when zero) until it has caught up, filter after
// filter, each in stream order, and calls add for each message, but those
// the server stored as its answer to a direct get ([streammsg.Reflected]).
// It stops after limit messages, those included, and then reports
// truncated. It reads with direct gets ([DirectReader]): no consumer.
func (l *ApprovalLedger) Scan(ctx context.Context, filters []string, since time.Time, limit int, add func(ApprovalMsg)) (truncated bool, err error) {
	if len(filters) == 0 {
		filters = []string{l.subjects.Approvals()}
	}
	r := natsbus.NewDirectReader(l.js)
	stream := l.subjects.ApprovalsStream()
	for _, f := range filters {
		t, err := r.AllSince(ctx, stream, f, since, limit, func(m natsbus.DirectMsg) bool {
			add(ApprovalMsg{Subject: m.Subject, Data: m.Data, Seq: m.Seq, Stored: m.Stored})
			limit--
			return limit > 0
		})
		if err != nil {
			return false, fmt.Errorf("reading %s: %w", stream, err)
		}
		if t || limit <= 0 {
			return true, nil
		}
	}
	return false, nil
}
