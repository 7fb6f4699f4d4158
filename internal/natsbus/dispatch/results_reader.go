package dispatch

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// resultsReader is a Dispatcher's one consumer of the results stream: an
// ordered consumer of every result subject, started by the first Open and
// kept until [Dispatcher.Close], whose results are handed to the inbox of
// their run by the run token of their subject. A coordinator with
// thousands of runs reads their results through one consumer, not
// thousands.
//
// It starts after the last message the stream held when it was created,
// and an ordered consumer that recovers (missed heartbeats, its consumer
// deleted) resumes after the last message it delivered, so a result stored
// while the connection was down is delivered once it is back. A result
// stored before an inbox was registered is not handed to it: a run that
// needs those (a resumed run) reads them with [Inbox.CaughtUp], up to pos
// at the inbox's registration, so that no result reaches an inbox twice.
type resultsReader struct {
	js     jetstream.JetStream
	stream string
	// root is the results subject without the wildcard: "<prefix>.result.".
	root    string
	inboxes *sync.Map // protocol.RunID -> *Inbox, the Dispatcher's
	log     zerolog.Logger

	mu sync.Mutex // serialises start, stop and pos with inbox registration
	// pos is the highest stream sequence handed on (or the one before the
	// first the consumer reads).
	pos       uint64
	consumer  jetstream.Consumer
	consuming jetstream.ConsumeContext
	stopped   bool
}

// register makes in the inbox of its run and returns the last stream
// sequence the reader handed on before it: every later result of the run
// reaches in. It starts the reader if it is not running.
func (rr *resultsReader) register(ctx context.Context, in *Inbox) (uint64, error) {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	if rr.stopped {
		return 0, fmt.Errorf("natsbus: the dispatcher is closed")
	}
	if rr.consuming == nil {
		if err := rr.start(ctx); err != nil {
			return 0, err
		}
	}
	rr.inboxes.Store(in.run, in)
	return rr.pos, nil
}

// start creates the consumer after the stream's last message and starts
// reading. rr.mu is held.
func (rr *resultsReader) start(ctx context.Context) error {
	fctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	st, err := rr.js.Stream(fctx, rr.stream)
	if err != nil {
		return fmt.Errorf("natsbus: reading the results stream: %w", err)
	}
	last := st.CachedInfo().State.LastSeq
	cons, err := rr.js.OrderedConsumer(fctx, rr.stream, jetstream.OrderedConsumerConfig{
		FilterSubjects:    []string{rr.root + ">"},
		DeliverPolicy:     jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:       last + 1,
		InactiveThreshold: resultsConsumerInactive,
	})
	if err != nil {
		return fmt.Errorf("natsbus: reading the results stream: %w", err)
	}
	cc, err := cons.Consume(rr.onResult, jetstream.ConsumeErrHandler(rr.onConsumeError))
	if err != nil {
		deleteConsumer(rr.js, cons)
		return fmt.Errorf("natsbus: reading the results stream: %w", err)
	}
	rr.pos, rr.consumer, rr.consuming = last, cons, cc
	return nil
}

// stop stops reading and deletes the consumer. It is idempotent.
func (rr *resultsReader) stop() {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	rr.stopped = true
	if rr.consuming == nil {
		return
	}
	rr.consuming.Stop()
	deleteConsumer(rr.js, rr.consumer)
	rr.consuming, rr.consumer = nil, nil
}

// onResult hands a result to the inbox of the run its subject names;
// one of a run with no open inbox here (closed, never opened, another
// coordinator's) is dropped (logged at debug).
func (rr *resultsReader) onResult(m jetstream.Msg) {
	var seq uint64
	if md, err := m.Metadata(); err == nil {
		seq = md.Sequence.Stream
	}
	run, _, _ := strings.Cut(strings.TrimPrefix(m.Subject(), rr.root), ".")
	rr.mu.Lock()
	if seq > rr.pos {
		rr.pos = seq
	}
	v, ok := rr.inboxes.Load(protocol.RunID(run))
	rr.mu.Unlock()
	if !ok {
		rr.log.Debug().Str(natsbus.LogSubject, m.Subject()).Msg("dropped a result of a run with no inbox here")
		return
	}
	v.(*Inbox).onResult(m)
}

// onConsumeError handles trouble reading the results stream. What the
// ordered consumer reports most it recovers from by itself, re-creating
// its consumer from the last result it delivered, so no result is lost:
// two idle heartbeats missed (the server, this process or the link too busy
// or stalled for that long — a loaded machine, a pause), its consumer
// deleted, a request nobody answered. Such a recovery is logged at
// info. Anything else is a warning.
func (rr *resultsReader) onConsumeError(_ jetstream.ConsumeContext, err error) {
	if recovers(err) {
		rr.log.Info().Err(err).Msg("reading the results: recovering")
		return
	}
	rr.log.Warn().Err(err).Msg("reading the results failed")
}

// deleteConsumer deletes an ordered consumer's current consumer, best
// effort and not while disconnected: a consumer left behind expires on its
// own (its inactive threshold).
func deleteConsumer(js jetstream.JetStream, cons jetstream.Consumer) {
	if cons == nil {
		return
	}
	if info := cons.CachedInfo(); info != nil && js.Conn().IsConnected() {
		ctx, cancel := context.WithTimeout(context.Background(), deleteConsumerTimeout)
		defer cancel()
		js.DeleteConsumer(ctx, info.Stream, info.Name)
	}
}
