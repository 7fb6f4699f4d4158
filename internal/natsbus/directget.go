package natsbus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/natsbus/streammsg"
)

// DirectReader reads what streams hold with direct gets
// ($JS.API.DIRECT.GET.<stream>): a batch of the messages on a subject from
// a sequence on, or the last message of each of some subjects. It creates
// no consumer and writes nothing, so a role that may only read (the
// viewer, in an account of its own) needs no more than the direct gets it
// imports. nats.go's jetstream package has single gets only; the server
// answers a batch with one message each (headers Nats-Subject,
// Nats-Sequence, Nats-Time-Stamp, Nats-Num-Pending) and a closing status
// 204 EOB.
//
// The streams read must allow direct gets (their AllowDirect). A direct
// get may be answered by any replica: what a batch reads may lag the
// stream's leader by a moment.
type DirectReader struct {
	nc  *nats.Conn
	api string
}

// NewDirectReader returns a reader on js's connection and JetStream
// domain.
func NewDirectReader(js JetStream) *DirectReader {
	return &DirectReader{nc: js.Conn(), api: APIPrefix(js)}
}

// Bounds of a direct get.
const (
	// MaxDirectBatch bounds the messages one batch asks for.
	MaxDirectBatch = 256
	// maxDirectBatchBytes bounds the bytes of one batch's messages (the
	// server stops after the message that passes it).
	maxDirectBatchBytes = 4 << 20
	// maxMultiLast is the most subjects the server answers a last-of-each
	// get for.
	maxMultiLast = 1024
	// defaultDirectTimeout bounds a batch when the caller's ctx has no
	// deadline.
	defaultDirectTimeout = 5 * time.Second
)

// DirectMsg is one message a direct get answered with.
type DirectMsg struct {
	Subject string
	Seq     uint64
	// Stored is when the server stored it.
	Stored time.Time
	Data   []byte
	// Header holds the headers the message was stored with (those the
	// server adds to its answer removed).
	Header nats.Header
	// Reflected is set on a message stored with the headers of a direct
	// get's answer (the server's answer to somebody's direct get, stored
	// where its reply subject pointed): nobody published it, and it is to
	// be skipped.
	Reflected bool
}

// DirectBatch is what one batched direct get read.
type DirectBatch struct {
	Msgs []DirectMsg
	// Pending counts the messages on the batch's subject stored after the
	// last one read, when the server answered: 0 when the read is caught
	// up.
	Pending uint64
}

// Next reads up to n (at most MaxDirectBatch) messages of stream on
// subject (which may hold wildcards) from sequence from on (from 1 when
// 0), in stream order. It returns an empty batch when none is stored
// there.
func (r *DirectReader) Next(ctx context.Context, stream, subject string, from uint64, n int) (DirectBatch, error) {
	n = min(max(n, 1), MaxDirectBatch)
	req := directGetRequest{Seq: max(from, 1), NextBySubject: subject, Batch: n, MaxBytes: maxDirectBatchBytes}
	return r.batch(ctx, stream, req, n)
}

// LastOf reads the last message of stream on each subject matching
// subjects (which may hold wildcards; at most 1024 subjects match), in
// stream order: a key-value bucket's current values, one read.
func (r *DirectReader) LastOf(ctx context.Context, stream string, subjects ...string) ([]DirectMsg, error) {
	if len(subjects) == 0 {
		return nil, nil
	}
	req := directGetRequest{MultiLast: subjects, Batch: maxMultiLast, MaxBytes: maxDirectBatchBytes}
	b, err := r.batch(ctx, stream, req, maxMultiLast)
	if err != nil {
		return nil, err
	}
	if b.Pending > 0 {
		return nil, fmt.Errorf("natsbus: the last messages of %s: more than the %d bytes one read holds", stream, maxDirectBatchBytes)
	}
	return b.Msgs, nil
}

// All reads the messages of stream on subject from sequence from on,
// batch after batch until it has caught up, and calls add for each that
// is not Reflected; add returns false to stop. It reads at most limit
// messages (Reflected ones included; no bound when limit <= 0) and
// reports whether it stopped there.
func (r *DirectReader) All(ctx context.Context, stream, subject string, from uint64, limit int, add func(DirectMsg) bool) (truncated bool, err error) {
	return r.all(ctx, stream, subject, directGetRequest{Seq: max(from, 1)}, limit, add)
}

// AllSince is All from the first message stored at or after since.
func (r *DirectReader) AllSince(ctx context.Context, stream, subject string, since time.Time, limit int, add func(DirectMsg) bool) (truncated bool, err error) {
	if since.IsZero() {
		return r.All(ctx, stream, subject, 0, limit, add)
	}
	since = since.UTC()
	return r.all(ctx, stream, subject, directGetRequest{StartTime: &since}, limit, add)
}

// all reads as All does, its first batch from first's start.
func (r *DirectReader) all(ctx context.Context, stream, subject string, first directGetRequest, limit int, add func(DirectMsg) bool) (truncated bool, err error) {
	if limit <= 0 {
		limit = math.MaxInt
	}
	read := 0
	req := first
	for {
		n := min(MaxDirectBatch, limit-read)
		req.NextBySubject, req.Batch, req.MaxBytes = subject, n, maxDirectBatchBytes
		b, err := r.batch(ctx, stream, req, n)
		if err != nil {
			return false, err
		}
		for _, m := range b.Msgs {
			read++
			req = directGetRequest{Seq: m.Seq + 1}
			if !m.Reflected && !add(m) {
				return false, nil
			}
		}
		switch {
		case len(b.Msgs) == 0 || b.Pending == 0:
			return false, nil
		case read >= limit:
			return true, nil
		}
	}
}

// AllSingly reads as All does, a stream that allows no direct get: one
// message a request (STREAM.MSG.GET, answered by the stream's leader), at
// most limit of them (no bound when limit <= 0).
func (r *DirectReader) AllSingly(ctx context.Context, stream, subject string, from uint64, limit int, add func(DirectMsg) bool) (truncated bool, err error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, defaultDirectTimeout)
		defer cancel()
	}
	if limit <= 0 {
		limit = math.MaxInt
	}
	seq := max(from, 1)
	for read := 0; ; read++ {
		if read >= limit {
			return true, nil
		}
		body, err := json.Marshal(directGetRequest{Seq: seq, NextBySubject: subject})
		if err != nil {
			return false, err
		}
		reply, err := r.nc.RequestWithContext(ctx, r.api+"STREAM.MSG.GET."+stream, body)
		if err != nil {
			return false, fmt.Errorf("natsbus: a get of %s: %w", stream, err)
		}
		m, err := DecodeMsgGet(reply.Data)
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
			return false, nil
		case err != nil:
			return false, fmt.Errorf("natsbus: a get of %s: %w", stream, err)
		case m.Sequence < seq:
			return false, fmt.Errorf("natsbus: a get of %s: %w", stream, ErrDirectAnswer)
		}
		seq = m.Sequence + 1
		dm := DirectMsg{Subject: m.Subject, Seq: m.Sequence, Stored: m.Time, Data: m.Data, Header: m.Header,
			Reflected: streammsg.Reflected(m.Header)}
		if !dm.Reflected && !add(dm) {
			return false, nil
		}
	}
}

// directGetRequest is the body of a direct get (the server's
// JSApiMsgGetRequest).
type directGetRequest struct {
	Seq           uint64     `json:"seq,omitempty"`
	StartTime     *time.Time `json:"start_time,omitempty"`
	NextBySubject string     `json:"next_by_subj,omitempty"`
	Batch         int        `json:"batch,omitempty"`
	MaxBytes      int        `json:"max_bytes,omitempty"`
	MultiLast     []string   `json:"multi_last,omitempty"`
}

// batch sends req and reads the answer: at most limit messages, then the
// closing status.
func (r *DirectReader) batch(ctx context.Context, stream string, req directGetRequest, limit int) (DirectBatch, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, defaultDirectTimeout)
		defer cancel()
	}
	body, err := json.Marshal(req)
	if err != nil {
		return DirectBatch{}, err
	}
	inbox := r.nc.NewInbox()
	sub, err := r.nc.SubscribeSync(inbox)
	if err != nil {
		return DirectBatch{}, fmt.Errorf("natsbus: a direct get of %s: %w", stream, err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := r.nc.PublishRequest(r.api+"DIRECT.GET."+stream, inbox, body); err != nil {
		return DirectBatch{}, fmt.Errorf("natsbus: a direct get of %s: %w", stream, err)
	}
	var out DirectBatch
	for {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			return DirectBatch{}, fmt.Errorf("natsbus: a direct get of %s: %w", stream, err)
		}
		a, err := decodeDirectAnswer(m.Header, m.Data)
		if err != nil {
			return DirectBatch{}, fmt.Errorf("natsbus: a direct get of %s: %w", stream, err)
		}
		switch {
		case a.status == "":
			if len(out.Msgs) == limit {
				return DirectBatch{}, fmt.Errorf("natsbus: a direct get of %s: more messages than the %d asked for", stream, limit)
			}
			out.Msgs = append(out.Msgs, a.msg)
		case a.status == "204":
			// It names the last message sent: one that does not is no
			// end of this batch (a stored message whose headers read as
			// a status, say), and the read fails rather than stop short.
			var lastSeq uint64
			if n := len(out.Msgs); n > 0 {
				lastSeq = out.Msgs[n-1].Seq
			}
			if a.lastSeq != lastSeq {
				return DirectBatch{}, fmt.Errorf("natsbus: a direct get of %s: %w", stream, ErrDirectAnswer)
			}
			out.Pending = a.pending
			return out, nil
		case a.status == "404" && len(out.Msgs) == 0:
			return out, nil
		case a.status == "503":
			return DirectBatch{}, fmt.Errorf("natsbus: a direct get of %s: %w", stream, nats.ErrNoResponders)
		default:
			return DirectBatch{}, fmt.Errorf("natsbus: a direct get of %s: %w", stream, &DirectGetError{Status: a.status, Description: a.description})
		}
	}
}

// DirectGetError is a status the server answered a direct get with
// (other than its end or "no message").
type DirectGetError struct {
	Status      string
	Description string
}

func (e *DirectGetError) Error() string {
	return "the server answered " + e.Status + " " + e.Description
}

// ErrDirectAnswer is the error of an answer to a direct get that is
// neither a message nor a status.
var ErrDirectAnswer = errors.New("natsbus: not an answer to a direct get")

// The headers the server adds to each message of a batch's answer, in
// the order it adds them after the stored headers.
const (
	hdrDirectStream   = "Nats-Stream"
	hdrDirectSubject  = "Nats-Subject"
	hdrDirectSequence = "Nats-Sequence"
	hdrDirectTime     = "Nats-Time-Stamp"
	hdrDirectPending  = "Nats-Num-Pending"
	hdrDirectLast     = "Nats-Last-Sequence"
	// nats.go's names for a status line's code and text
	hdrStatus      = "Status"
	hdrDescription = "Description"
)

// directAnswer is one decoded message of a direct get's answer: a stored
// message, or (status set) the server's status.
type directAnswer struct {
	msg                 DirectMsg
	status, description string
	// of a 204 (the end of a batch): what is pending after it, and the
	// sequence of the last message sent
	pending, lastSeq uint64
}

// decodeDirectAnswer decodes one message of a batched direct get's
// answer from its headers h (as nats.go decoded them) and data.
//
// A stored message is answered with its own headers and then the
// server's six (hdrDirect*), appended: each of those names' last value is
// the server's, and what is left are the stored headers; a message stored
// with any of those names (in any case) is Reflected. A stored message may
// carry any header, a "Status" or a status line of its own included, so
// what tells the server's status apart is that it has no Nats-Sequence,
// which the server adds to every stored message it answers with.
func decodeDirectAnswer(h nats.Header, data []byte) (directAnswer, error) {
	if h == nil {
		return directAnswer{}, ErrDirectAnswer
	}
	if len(h.Values(hdrDirectSequence)) == 0 {
		// nats.go adds the status line's code and text last.
		status := last(h, hdrStatus)
		if status == "" {
			return directAnswer{}, ErrDirectAnswer
		}
		a := directAnswer{status: status, description: last(h, hdrDescription)}
		if status == "204" {
			n, err1 := strconv.ParseUint(last(h, hdrDirectPending), 10, 64)
			l, err2 := strconv.ParseUint(last(h, hdrDirectLast), 10, 64)
			if err1 != nil || err2 != nil {
				return directAnswer{}, ErrDirectAnswer
			}
			a.pending, a.lastSeq = n, l
		}
		return a, nil
	}
	seq, err := strconv.ParseUint(last(h, hdrDirectSequence), 10, 64)
	if err != nil || seq == 0 {
		return directAnswer{}, ErrDirectAnswer
	}
	stored, err := time.Parse(time.RFC3339Nano, last(h, hdrDirectTime))
	if err != nil {
		return directAnswer{}, ErrDirectAnswer
	}
	subject := last(h, hdrDirectSubject)
	if subject == "" {
		return directAnswer{}, ErrDirectAnswer
	}
	m := DirectMsg{Subject: subject, Seq: seq, Stored: stored, Data: data, Header: nats.Header{}}
	for k, vs := range h {
		if serverHeader(k) {
			vs = vs[:len(vs)-1]
		}
		for _, v := range vs {
			m.Header.Add(k, v)
		}
	}
	m.Reflected = streammsg.Reflected(m.Header)
	return directAnswer{msg: m}, nil
}

// serverHeader reports whether k names a header the server adds to a
// direct get's answer.
func serverHeader(k string) bool {
	switch k {
	case hdrDirectStream, hdrDirectSubject, hdrDirectSequence, hdrDirectTime, hdrDirectPending, hdrDirectLast:
		return true
	}
	return false
}

// last is the last value of h's key k.
func last(h nats.Header, k string) string {
	vs := h.Values(k)
	if len(vs) == 0 {
		return ""
	}
	return vs[len(vs)-1]
}

// StreamSubjects returns how many messages stream holds on each subject
// matching filter: a key-value bucket's keys, or the runs with a journal,
// read from the stream's information (no consumer).
func StreamSubjects(ctx context.Context, js JetStream, stream, filter string) (map[string]uint64, error) {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, fmt.Errorf("natsbus: stream %s: %w", stream, err)
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		return nil, fmt.Errorf("natsbus: stream %s: %w", stream, err)
	}
	return info.State.Subjects, nil
}
