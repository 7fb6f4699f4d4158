package natsbus

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/natsbus/streammsg"
)

// StreamWatch delivers the messages stored on some subjects of a stream,
// from a start, and then each one as it is stored: one ordered consumer,
// read once, never a re-read of the stream. It is what a caller that
// waits for something to be stored (an approval request, a run's journal
// entry) reads instead of polling.
type StreamWatch struct {
	it      jetstream.MessagesContext
	pending uint64
}

// StreamMsg is one message a [StreamWatch] delivers.
type StreamMsg struct {
	Subject string
	Data    []byte
	Seq     uint64
	// Stored is when the server stored it.
	Stored time.Time
	// Pending counts the messages on the watch's subjects stored after
	// this one when it was delivered: 0 when the watch has caught up.
	Pending uint64
	// Reflected is set on a message stored with the headers of a direct
	// get's answer (the server's answer to somebody's direct get,
	// reflected there: [streammsg.Reflected]): nobody published it, and
	// it is to be skipped but for its Pending.
	Reflected bool
}

// WatchStream starts reading stream on filters from the first message
// stored at or after since (the stream's first when zero), with at most
// maxPending messages buffered. ctx bounds the setup. Stop the watch when
// done; the server removes its consumer a minute after it stops reading.
func WatchStream(ctx context.Context, js JetStream, stream string, filters []string, since time.Time, maxPending int) (*StreamWatch, error) {
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: filters, DeliverPolicy: jetstream.DeliverAllPolicy, InactiveThreshold: time.Minute}
	if !since.IsZero() {
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &since
	}
	cons, err := js.OrderedConsumer(ctx, stream, cfg)
	if err != nil {
		return nil, fmt.Errorf("natsbus: watching %s: %w", stream, err)
	}
	var pending uint64
	if info := cons.CachedInfo(); info != nil {
		pending = info.NumPending
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(maxPending))
	if err != nil {
		return nil, fmt.Errorf("natsbus: watching %s: %w", stream, err)
	}
	return &StreamWatch{it: it, pending: pending}, nil
}

// Pending counts the messages on the watch's subjects that were stored
// when it started: 0 means every message it delivers is stored after.
func (w *StreamWatch) Pending() uint64 { return w.pending }

// Next returns the next message. It blocks until one comes, ctx ends or
// the watch stops.
func (w *StreamWatch) Next(ctx context.Context) (StreamMsg, error) {
	m, err := w.it.Next(jetstream.NextContext(ctx))
	if err != nil {
		return StreamMsg{}, err
	}
	md, err := m.Metadata()
	if err != nil {
		return StreamMsg{}, err
	}
	return StreamMsg{Subject: m.Subject(), Data: m.Data(), Seq: md.Sequence.Stream, Stored: md.Timestamp, Pending: md.NumPending,
		Reflected: streammsg.Reflected(m.Headers())}, nil
}

// Stop ends the watch; no message is delivered after it returns. It may
// be called more than once.
func (w *StreamWatch) Stop() { w.it.Stop() }
