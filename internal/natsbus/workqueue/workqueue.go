package workqueue

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"golang.org/x/sync/semaphore"

	"github.com/toolfleet/toolfleet/internal/natsbus"
)

// Decision is how a [WorkHandler] settles the message it was handed. It
// is the one place a work-queue message is acknowledged: the handler says
// what, [settle] does it.
type Decision struct {
	kind   decisionKind
	reason string
	delay  time.Duration
}

type decisionKind uint8

const (
	decAck decisionKind = iota
	decTerm
	decNak
	decSettled
	decLeave
)

// The decisions without parameters.
var (
	// Ack: done; the message leaves the work queue.
	Ack = Decision{kind: decAck}
	// Settled: nothing to send; the handler has settled the delivery
	// already (acknowledged it once its claim was stored), or the message
	// is gone from the stream, which settled it.
	Settled = Decision{kind: decSettled}
	// Leave: do not settle. The message stays with whoever owns it now (a
	// run another coordinator took over) or is redelivered after the ack
	// wait.
	Leave = Decision{kind: decLeave}
)

// Term terminates the message: it is never delivered again. reason shows
// in the server's advisories.
func Term(reason string) Decision { return Decision{kind: decTerm, reason: reason} }

// Nak hands the message back, for redelivery after delay (0: at once).
func Nak(delay time.Duration) Decision { return Decision{kind: decNak, delay: delay} }

// Settle applies d to m.
func Settle(m jetstream.Msg, d Decision) {
	switch d.kind {
	case decAck:
		m.Ack()
	case decTerm:
		m.TermWithReason(d.reason)
	case decNak:
		if d.delay > 0 {
			m.NakWithDelay(d.delay)
		} else {
			m.Nak()
		}
	}
}

// Delivery is one message a [WorkQueue] hands to its handler.
type Delivery struct {
	Msg jetstream.Msg
	// Attempt counts the message's deliveries, from 1.
	Attempt int
	// Seq is the message's stream sequence (0 when unknown).
	Seq uint64
	// Stored is when the stream stored the message.
	Stored time.Time

	// freeSlot gives the delivery's slot back early ([Delivery.FreeSlot]).
	freeSlot func()
}

// FreeSlot gives the delivery's slot back before its handler returns, when
// the work the slots bound is done and what is left waits on the server
// (storing a result, then settling): the queue can pull another message
// meanwhile. It does so only while the queue's Settling allowance has room
// (so a queue holds at most its slots plus that allowance of messages), and
// is a no-op otherwise or when called again.
func (d *Delivery) FreeSlot() {
	if d.freeSlot != nil {
		d.freeSlot()
	}
}

// Heartbeat tells the server, every interval, that the message is still
// being worked on, until the returned stop is called (stop is idempotent;
// once it returns, no further heartbeat is sent). It is a timer, not a
// goroutine: a call costs nothing until its first interval passes.
func (d *Delivery) Heartbeat(interval time.Duration) (stop func()) {
	var (
		mu      sync.Mutex
		stopped bool
		t       *time.Timer
	)
	mu.Lock()
	t = time.AfterFunc(interval, func() {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return
		}
		d.Msg.InProgress()
		t.Reset(interval)
	})
	mu.Unlock()
	return func() {
		mu.Lock()
		defer mu.Unlock()
		if !stopped {
			stopped = true
			t.Stop()
		}
	}
}

// WorkHandler does the work of one delivery and says how to settle it.
// Its context is the queue's execution context.
type WorkHandler func(ctx context.Context, d *Delivery) Decision

// WorkQueueConfig configures a [WorkQueue]. Slots and Ensure are required.
type WorkQueueConfig struct {
	// Slots bounds the handlers running at once; queues may share it. The
	// queue never takes a message without a free slot for it.
	Slots *semaphore.Weighted
	// Settling, when set, bounds the deliveries whose handler gave its slot
	// back early ([Delivery.FreeSlot]) and has not returned yet; queues may
	// share it. Default: none (FreeSlot does nothing).
	Settling *semaphore.Weighted
	// MaxFetchBatch bounds the messages taken in one pull. Default: 1.
	MaxFetchBatch int
	// PollWait bounds one pull's wait for a message. Default: 1s.
	PollWait time.Duration
	// Ensure creates or updates the consumer (and whatever it needs); Run
	// calls it again when the consumer or its stream is gone.
	Ensure func(ctx context.Context) (jetstream.Consumer, error)
	// Wait, when set, is called before each pull: the queue takes nothing
	// until it returns nil, and stops when it returns an error (a
	// StreamGuard's Wait holds it while a stream differs from its expected
	// configuration).
	Wait func(ctx context.Context) error
	// Gate, when set, orders this queue after another of higher priority:
	// it is asked, once the queue holds a free slot, whether it may pull
	// now and how many messages at most; when it may not, the queue gives
	// the slot back and waits for the gate. Default: nil, always.
	Gate PullGate
	// Pulled, when set, is told after each pull how many messages it took
	// and how many the consumer still held for delivery then (0 after an
	// empty pull): what a [PullGate] of a lower-priority queue decides
	// from, at no extra round trip.
	Pulled func(took int, pending uint64)
	// IdlePoll, when set, makes the queue never wait in the server for a
	// message: it takes what is waiting without waiting and, when nothing
	// is, pauses from IdlePoll/8 up to IdlePoll (doubling while idle)
	// before it asks again, so it holds no slot while idle. For a queue
	// whose messages can wait: batch calls. Default: 0, pulls wait up to
	// PollWait in the server holding one slot.
	IdlePoll time.Duration
	// JS, when set, makes the queue stream its pulls: one subscription
	// for the life of Run, a request sent as soon as a slot frees, while
	// others are still out (stream.go). It must be the context the
	// consumer is on. Not with IdlePoll. Default: nil, one pull at a time.
	JS jetstream.JetStream
	// InFlight, when set, counts the running handlers, so the owner can
	// wait for them under its shutdown grace.
	InFlight *sync.WaitGroup
	// Logger receives pull failures (rate-limited), as "pulling <Noun>
	// failed; retrying". Default noun: "messages".
	Logger zerolog.Logger
	Noun   string
}

// PullGate orders a [WorkQueue] after another of higher priority
// (priority.go).
type PullGate interface {
	// Admit reports whether the queue may pull now, and at most how many
	// messages (0: no bound beyond its own).
	Admit() (limit int, ok bool)
	// Wait returns once Admit may say yes, or with ctx's error.
	Wait(ctx context.Context) error
	// Took tells the gate the queue took n messages.
	Took(n int)
}

// WorkQueue pulls messages from one durable consumer of a work-queue
// stream into free slots and runs a handler for each, which returns one
// [Decision]: the toolworker serves each tool's calls with one, a serving
// coordinator its runs.
type WorkQueue struct {
	cfg     WorkQueueConfig
	handler WorkHandler
	limited zerolog.Logger
	cons    jetstream.Consumer

	pullCount, pulledCount atomic.Int64 // pulls made, messages they took
}

// Pulls reports the pulls the queue made and the messages they took.
func (q *WorkQueue) Pulls() (pulls, messages int64) {
	return q.pullCount.Load(), q.pulledCount.Load()
}

// NewWorkQueue returns a queue; Start (or Run after Ensure) serves it.
func NewWorkQueue(cfg WorkQueueConfig, h WorkHandler) *WorkQueue {
	if cfg.MaxFetchBatch < 1 {
		cfg.MaxFetchBatch = 1
	}
	if cfg.PollWait <= 0 {
		cfg.PollWait = DefaultPollWait
	}
	if cfg.InFlight == nil {
		cfg.InFlight = &sync.WaitGroup{}
	}
	if cfg.Noun == "" {
		cfg.Noun = "messages"
	}
	return &WorkQueue{cfg: cfg, handler: h, limited: natsbus.Sampled(cfg.Logger)}
}

// Ensure creates or updates the consumer once.
func (q *WorkQueue) Ensure(ctx context.Context) error {
	cons, err := q.cfg.Ensure(ctx)
	if err != nil {
		return err
	}
	q.cons = cons
	return nil
}

// SetConsumer sets the consumer, for an owner that created it itself.
func (q *WorkQueue) SetConsumer(c jetstream.Consumer) { q.cons = c }

// EnsureRetrying is Ensure, retried while the failure is transient and ctx
// lasts.
func (q *WorkQueue) EnsureRetrying(ctx context.Context) error {
	for failures := 1; ; failures++ {
		err := q.Ensure(ctx)
		if err == nil || ctx.Err() != nil || !natsbus.Transient(err) {
			return err
		}
		q.limited.Warn().Err(err).Int("failures", failures).Msg("creating the consumer failed; retrying")
		if !natsbus.SleepCtx(ctx, natsbus.Backoff(failures)) {
			return ctx.Err()
		}
	}
}

// Run pulls while ctx lasts, one free slot per message, and runs the
// handler of each in its own goroutine under execCtx, settling the message
// as it decides. Ensure must have succeeded. Run returns once ctx ended
// and no pull is in progress; handlers may still run (see InFlight).
//
// A queue with a JetStream context (JS) and no IdlePoll streams its pulls
// on one subscription (stream.go); others make one pull at a time.
func (q *WorkQueue) Run(ctx, execCtx context.Context) {
	if q.cfg.JS != nil && q.cfg.IdlePoll == 0 {
		q.runStreamed(ctx, execCtx)
		return
	}
	// Handlers run on goroutines that, done with a message, wait for the
	// next one (their stacks already grown) until Run returns: about as
	// many goroutines as the slots, not one per message.
	idle := make(chan jetstream.Msg)
	defer close(idle)
	q.runFetching(ctx, execCtx, idle)
}

// runFetching is Run making one pull at a time, each a subscription of
// its own (jetstream's Fetch).
func (q *WorkQueue) runFetching(ctx, execCtx context.Context, idle chan jetstream.Msg) {
	failures, empty := 0, 0
	for {
		if q.cfg.Wait != nil {
			if err := q.cfg.Wait(ctx); err != nil {
				return
			}
		}
		limit, again, ok := q.admitOne(ctx)
		if !ok {
			return
		}
		if again {
			continue
		}
		slots := 1
		for slots < limit && q.cfg.Slots.TryAcquire(1) {
			slots++
		}
		var msgs []jetstream.Msg
		var err error
		if q.cfg.IdlePoll > 0 {
			msgs, err = q.pullNoWait(slots)
		} else {
			msgs, err = q.pull(ctx, slots)
		}
		q.pullCount.Add(1)
		q.pulledCount.Add(int64(len(msgs)))
		if err == nil {
			q.pulled(msgs)
		}
		for _, m := range msgs {
			q.cfg.InFlight.Add(1)
			q.hand(execCtx, m, idle)
		}
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			failures = 0
			if q.cfg.IdlePoll > 0 && len(msgs) == 0 {
				empty++
				if !natsbus.SleepCtx(ctx, min(q.cfg.IdlePoll/8<<min(empty-1, 3), q.cfg.IdlePoll)) {
					return
				}
			} else {
				empty = 0
			}
			continue
		}
		failures++
		q.limited.Warn().Err(err).Int("failures", failures).Msg("pulling " + q.cfg.Noun + " failed; retrying")
		if errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrConsumerNotFound) ||
			errors.Is(err, jetstream.ErrStreamNotFound) {
			if err := q.Ensure(ctx); err != nil {
				q.limited.Warn().Err(err).Msg("re-creating the consumer failed")
			}
		}
		if !natsbus.SleepCtx(ctx, natsbus.Backoff(failures)) {
			return
		}
	}
}

// admitOne waits for a free slot and then asks the gate whether the queue
// may pull now, and how many messages at most (limit). ok is false once
// ctx ended. again: the gate said not yet and has since opened; the slot
// went back, and the caller asks again.
func (q *WorkQueue) admitOne(ctx context.Context) (limit int, again, ok bool) {
	if err := q.cfg.Slots.Acquire(ctx, 1); err != nil {
		return 0, false, false
	}
	limit = q.cfg.MaxFetchBatch
	if q.cfg.Gate == nil {
		return limit, false, true
	}
	n, admitted := q.cfg.Gate.Admit()
	if !admitted {
		q.cfg.Slots.Release(1)
		if err := q.cfg.Gate.Wait(ctx); err != nil {
			return 0, false, false
		}
		return 0, true, true
	}
	if n > 0 {
		limit = min(limit, n)
	}
	return limit, false, true
}

// Drain waits for the handlers in InFlight for up to grace; past it, it
// calls overdue (which should make them end: cancel their context) and
// waits for them. It reports whether the grace ran out.
func (q *WorkQueue) Drain(grace time.Duration, overdue func()) bool {
	return Drain(q.cfg.InFlight, grace, overdue)
}

// Drain waits for the handlers counted in inflight for up to grace; past
// it, it calls overdue and waits for them. It reports whether the grace
// ran out. [WorkQueue.Drain] is Drain of the queue's InFlight; a worker
// whose queues share one InFlight drains them all at once.
func Drain(inflight *sync.WaitGroup, grace time.Duration, overdue func()) bool {
	done := make(chan struct{})
	go func() { inflight.Wait(); close(done) }()
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-done:
		return false
	case <-t.C:
		overdue()
		<-done
		return true
	}
}

// hand runs the handler of m, for which the caller holds a slot, on an
// idle handler goroutine of Run, or on a new one when none is idle.
func (q *WorkQueue) hand(execCtx context.Context, m jetstream.Msg, idle chan jetstream.Msg) {
	select {
	case idle <- m:
	default:
		go q.handle(execCtx, m, idle)
	}
}

// handle serves m and then every message handed to it on idle, until idle
// is closed.
func (q *WorkQueue) handle(execCtx context.Context, m jetstream.Msg, idle <-chan jetstream.Msg) {
	for {
		q.serveSlot(execCtx, m)
		var ok bool
		if m, ok = <-idle; !ok {
			return
		}
	}
}

// serveSlot serves m and gives back its slot, or its place in Settling if
// the handler gave the slot back early.
func (q *WorkQueue) serveSlot(ctx context.Context, m jetstream.Msg) {
	defer q.cfg.InFlight.Done()
	settling := false // only this goroutine reads and writes it
	defer func() {
		if settling {
			q.cfg.Settling.Release(1)
		} else {
			q.cfg.Slots.Release(1)
		}
	}()
	q.serve(ctx, m, func() {
		if !settling && q.cfg.Settling != nil && q.cfg.Settling.TryAcquire(1) {
			settling = true
			q.cfg.Slots.Release(1)
		}
	})
}

// serve runs the handler of one message and settles it.
func (q *WorkQueue) serve(ctx context.Context, m jetstream.Msg, freeSlot func()) {
	d := &Delivery{Msg: m, Attempt: 1, freeSlot: freeSlot}
	if md, err := m.Metadata(); err == nil {
		d.Attempt = max(int(md.NumDelivered), 1)
		d.Seq = md.Sequence.Stream
		d.Stored = md.Timestamp
	}
	Settle(m, q.handler(ctx, d))
}

// pull takes up to slots messages, for which the caller holds slots, and
// releases the slots it does not fill. It first takes what is waiting
// without waiting; if nothing is, it keeps one slot and waits up to
// PollWait for one message. An empty poll is not an error.
//
// The server ends the wait (PollWait after it got the request) and the
// client waits for its word: a pull that gave up in the client first would
// drop a message the server sent it meanwhile — on a slow link or a loaded
// machine, the messages sent in a poll's last moments — and the server
// would send it again only after the ack wait.
func (q *WorkQueue) pull(ctx context.Context, slots int) ([]jetstream.Msg, error) {
	sem := q.cfg.Slots
	if slots > 1 {
		batch, err := q.cons.FetchNoWait(slots)
		if err != nil {
			sem.Release(int64(slots))
			return nil, err
		}
		var msgs []jetstream.Msg
		for m := range batch.Messages() {
			msgs = append(msgs, m)
		}
		if len(msgs) > 0 || batch.Error() != nil {
			sem.Release(int64(slots - len(msgs)))
			return msgs, batch.Error()
		}
		sem.Release(int64(slots - 1))
	}
	batch, err := q.cons.Fetch(1, jetstream.FetchMaxWait(q.cfg.PollWait))
	if err != nil {
		sem.Release(1)
		return nil, err
	}
	select {
	case m, ok := <-batch.Messages():
		if ok {
			return []jetstream.Msg{m}, nil
		}
	case <-ctx.Done():
		// Stopping: a message the server still sends before the pull
		// ends goes back at once, to be taken by another consumer. Run
		// returns only once the server ended the pull, so nothing is sent
		// to a stopped queue.
		sem.Release(1)
		handBack(batch)
		return nil, nil
	}
	sem.Release(1)
	if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, jetstream.ErrNoMessages) {
		return nil, err
	}
	return nil, nil
}

// pullNoWait takes up to slots messages without waiting, for which the
// caller holds slots, and releases the slots it does not fill. An empty
// pull is not an error.
func (q *WorkQueue) pullNoWait(slots int) ([]jetstream.Msg, error) {
	batch, err := q.cons.FetchNoWait(slots)
	if err != nil {
		q.cfg.Slots.Release(int64(slots))
		return nil, err
	}
	var msgs []jetstream.Msg
	for m := range batch.Messages() {
		msgs = append(msgs, m)
	}
	q.cfg.Slots.Release(int64(slots - len(msgs)))
	if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, jetstream.ErrNoMessages) {
		return msgs, err
	}
	return msgs, nil
}

// pulled tells the gate and the Pulled hook what a pull took.
func (q *WorkQueue) pulled(msgs []jetstream.Msg) {
	if q.cfg.Gate != nil && len(msgs) > 0 {
		q.cfg.Gate.Took(len(msgs))
	}
	if q.cfg.Pulled == nil {
		return
	}
	var pending uint64
	if n := len(msgs); n > 0 {
		if md, err := msgs[n-1].Metadata(); err == nil {
			pending = md.NumPending
		}
	}
	q.cfg.Pulled(len(msgs), pending)
}

// handBack negatively acknowledges whatever batch still delivers, so the
// server redelivers it now rather than after the ack wait.
func handBack(batch jetstream.MessageBatch) {
	for m := range batch.Messages() {
		Settle(m, Nak(0))
	}
}

// DefaultPollWait is the default of [WorkQueueConfig].PollWait: how long
// one pull waits for messages.
const DefaultPollWait = time.Second
