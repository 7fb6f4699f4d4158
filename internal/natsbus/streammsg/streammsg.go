// Package streammsg reads stored messages of a JetStream stream by
// sequence. It is part of the natsbus boundary: packages that check what a
// stream holds (approvalproof) read it through here, never through
// nats.go/jetstream.
package streammsg

import (
	"context"
	"errors"
	"strconv"
	"strings"
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
	// Reflected: the stored headers carry those the server adds to a
	// direct get's answer (see [Reflected]).
	Reflected bool
}

// The headers the server adds to a direct get's answer: the stream, the
// message's subject, sequence and time (and, in a batch, what is pending).
var directGetHeaders = []string{"Nats-Stream", "Nats-Subject", "Nats-Sequence", "Nats-Time-Stamp", "Nats-Num-Pending", "Nats-Last-Sequence"}

// Reflected reports whether h, the headers a message was stored with,
// carries any header the server adds to a direct get's answer. Such a
// message is one the server sent as the answer to somebody's direct get,
// on the reply subject that somebody chose, and a stream capturing that
// subject stored: its content is whatever the other stream held, never a
// message of the subject it sits on. (A direct get asked with
// {"no_hdr":true} answers with the payload alone: nothing marks it.)
func Reflected(h nats.Header) bool {
	for k := range h {
		for _, d := range directGetHeaders {
			if strings.EqualFold(k, d) {
				return true
			}
		}
	}
	return false
}

// Get returns the message at seq; with a subject, the first message on
// that subject at or after seq. It returns ErrNotFound when there is none.
func Get(ctx context.Context, st Stream, seq uint64, subject string) (Msg, error) {
	var opts []jetstream.GetMsgOpt
	if subject != "" {
		opts = append(opts, jetstream.WithGetMsgSubject(subject))
	}
	return read(st, func() (*jetstream.RawStreamMsg, error) { return st.GetMsg(ctx, seq, opts...) })
}

// Last returns the last message stored on subject, or ErrNotFound.
func Last(ctx context.Context, st Stream, subject string) (Msg, error) {
	return read(st, func() (*jetstream.RawStreamMsg, error) { return st.GetLastMsgForSubject(ctx, subject) })
}

// read reads one message of st with get.
func read(st Stream, get func() (*jetstream.RawStreamMsg, error)) (Msg, error) {
	m, err := get()
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return Msg{}, ErrNotFound
	}
	if err != nil {
		return Msg{}, err
	}
	out := Msg{Subject: m.Subject, Header: m.Header, Data: m.Data, Sequence: m.Sequence, Time: m.Time}
	if st.CachedInfo() != nil && st.CachedInfo().Config.AllowDirect {
		// nats.go read it with a direct get (it does when the stream
		// allows them): the server appended its headers to the stored
		// ones, and nats.go took the first values, the stored ones when
		// there are any. The server's are the last.
		if out, err = fromDirectGet(out); err != nil {
			return Msg{}, err
		}
	}
	out.Reflected = Reflected(out.Header)
	return out, nil
}

// fromDirectGet takes m's subject, sequence and time from the headers the
// server appended to a direct get's answer (the last values) and leaves
// m.Header the headers the message was stored with.
func fromDirectGet(m Msg) (Msg, error) {
	last := func(k string) (string, bool) {
		v := m.Header.Values(k)
		if len(v) == 0 {
			return "", false
		}
		return v[len(v)-1], true
	}
	subj, ok1 := last("Nats-Subject")
	seqStr, ok2 := last("Nats-Sequence")
	ts, ok3 := last("Nats-Time-Stamp")
	if !ok1 || !ok2 || !ok3 {
		return Msg{}, errors.New("streammsg: a direct get's answer without its headers")
	}
	seq, err := strconv.ParseUint(seqStr, 10, 64)
	if err != nil {
		return Msg{}, errors.New("streammsg: a direct get's answer with a bad sequence")
	}
	tm, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		return Msg{}, errors.New("streammsg: a direct get's answer with a bad time")
	}
	m.Subject, m.Sequence, m.Time = subj, seq, tm
	stored := nats.Header{}
	for k, v := range m.Header {
		stored[k] = append([]string(nil), v...)
	}
	for _, k := range []string{"Nats-Stream", "Nats-Subject", "Nats-Sequence", "Nats-Time-Stamp"} {
		v := stored[k]
		if len(v) <= 1 {
			delete(stored, k)
		} else {
			stored[k] = v[:len(v)-1]
		}
	}
	m.Header = stored
	return m, nil
}
