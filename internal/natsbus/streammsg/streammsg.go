// Package streammsg reads stored messages of a JetStream stream by
// sequence. It is part of the natsbus boundary: packages that check what a
// stream holds (approvalproof) read it through here, never through
// nats.go/jetstream.
package streammsg

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Stream is a JetStream stream handle, as natsbus looks it up.
type Stream = jetstream.Stream

// ErrNotFound is returned by [Get] when the stream holds no message at or
// after the sequence (on the subject, when one is given).
var ErrNotFound = errors.New("streammsg: message not found")

// Msg is one stored message.
type Msg struct {
	Subject  string
	Header   nats.Header
	Data     []byte
	Sequence uint64
	// Time is when the server stored it.
	Time time.Time
}

// Get returns the message at seq; with a subject, the first message on
// that subject at or after seq. It returns ErrNotFound when there is none.
func Get(ctx context.Context, st Stream, seq uint64, subject string) (Msg, error) {
	var opts []jetstream.GetMsgOpt
	if subject != "" {
		opts = append(opts, jetstream.WithGetMsgSubject(subject))
	}
	m, err := st.GetMsg(ctx, seq, opts...)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return Msg{}, ErrNotFound
	}
	if err != nil {
		return Msg{}, err
	}
	return Msg{Subject: m.Subject, Header: m.Header, Data: m.Data, Sequence: m.Sequence, Time: m.Time}, nil
}
