package looptest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// Handler plays a worker for one call. Its context ends at the call's
// deadline or when the call is cancelled. Returning false means the worker
// never answers (a dead or hung worker).
type Handler func(ctx context.Context, c protocol.Call) (protocol.Result, bool)

// InboxBuffer is how many undelivered events an inbox holds by default;
// further events are dropped and counted, as the loop.Dispatcher contract
// says.
const InboxBuffer = 1024

// Dispatcher is an in-memory [loop.Dispatcher]: each published call runs
// Handler in its own goroutine and its result comes back through the run's
// inbox. It records published calls and cancels and can inject arbitrary
// events (duplicates, late or forged results).
type Dispatcher struct {
	// Started makes every call send a Started event before its handler
	// runs, as a worker does when it starts a call.
	Started bool
	// PublishErr, when set, is asked before each publish; an error refuses
	// the call.
	PublishErr func(protocol.Call) error
	// OpenErr, when set, makes Open fail.
	OpenErr error
	// Durable makes the dispatcher keep what a JetStream fleet keeps for a
	// resumed run: a run may be opened again once its inbox is closed, the
	// new inbox first delivers every result stored for the run (and then
	// says it caught up), and a call key published twice runs once (the
	// second publish delivers the call's first stored result again).
	Durable bool
	// InboxSize is how many undelivered events each inbox holds; when the
	// reader falls that far behind, further events are dropped and counted
	// (the inbox's Dropped method). Default: InboxBuffer.
	InboxSize int
	// Withdrawals makes every inbox a [loop.WithdrawInbox] that plays the
	// calls stream's claim: a call is claimed as its handler starts, and
	// Withdraw takes back a call that is not (one Hold keeps queued),
	// which then never runs.
	Withdrawals bool
	// Hold, when set, keeps each call it returns true for queued: no
	// worker claims it and its handler never runs.
	Hold func(protocol.Call) bool
	// WithdrawErr, when set, is what every Withdraw returns: the fleet
	// cannot tell whether the call was claimed.
	WithdrawErr error

	handler Handler

	mu        sync.Mutex
	inboxes   map[protocol.RunID]*inbox
	opens     int
	published []protocol.Call
	cancels   []protocol.Cancel
	running   map[protocol.CallKey]context.CancelFunc
	wg        sync.WaitGroup
	stored    map[protocol.RunID][]protocol.Result // Durable
	seen      map[protocol.CallKey]bool            // Durable
	queued    map[protocol.CallKey]bool            // held by Hold, not withdrawn
	asked     []protocol.CallKey                   // Withdraw's calls, in order
	withdrawn []protocol.CallKey
	atMost    map[protocol.CallKey]bool // published AtMostOnce
}

var _ loop.Dispatcher = (*Dispatcher)(nil)

// New returns a Dispatcher that runs handler for every published call.
func New(handler Handler) *Dispatcher {
	return &Dispatcher{handler: handler, inboxes: map[protocol.RunID]*inbox{}, running: map[protocol.CallKey]context.CancelFunc{}}
}

// Open implements [loop.Dispatcher]. Opening a run twice is an error.
func (d *Dispatcher) Open(ctx context.Context, run protocol.RunID) (loop.Inbox, error) {
	if d.OpenErr != nil {
		return nil, d.OpenErr
	}
	if !run.Valid() {
		return nil, fmt.Errorf("looptest: invalid run id %q", run)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if old, ok := d.inboxes[run]; ok && !(d.Durable && old.closed()) {
		return nil, fmt.Errorf("looptest: run %s opened twice", run)
	}
	d.opens++
	size := d.InboxSize
	if size <= 0 {
		size = InboxBuffer
	}
	ib := &inbox{ch: make(chan loop.Event, size), done: make(chan struct{}), caught: make(chan struct{})}
	d.inboxes[run] = ib
	if d.Durable {
		for _, r := range d.stored[run] {
			ib.ch <- loop.Event{Result: &r}
		}
	}
	close(ib.caught)
	if d.Withdrawals {
		return &withdrawInbox{inbox: ib, d: d}, nil
	}
	return ib, nil
}

// Publish implements [loop.Dispatcher]. It refuses invalid calls and calls
// of runs that have not opened an inbox.
func (d *Dispatcher) Publish(ctx context.Context, o loop.Outgoing) error {
	c := o.Call
	if err := c.Validate(); err != nil {
		return fmt.Errorf("looptest: invalid call: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if d.PublishErr != nil {
		if err := d.PublishErr(c); err != nil {
			return err
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	ib := d.inboxes[c.RunID]
	if ib == nil {
		return errors.New("looptest: publish before Open")
	}
	if d.Durable {
		if d.seen[c.CallKey] {
			// Deduplicated, as by Nats-Msg-Id; its first stored result,
			// if any, is delivered again, as a resumed coordinator reads
			// back the result of a call it publishes again.
			for _, r := range d.stored[c.RunID] {
				if r.CallKey == c.CallKey {
					ib.send(loop.Event{Result: &r})
					break
				}
			}
			return nil
		}
		if d.seen == nil {
			d.seen = map[protocol.CallKey]bool{}
		}
		if d.stored == nil {
			d.stored = map[protocol.RunID][]protocol.Result{}
		}
		d.seen[c.CallKey] = true
	}
	d.published = append(d.published, c)
	if o.AtMostOnce {
		if d.atMost == nil {
			d.atMost = map[protocol.CallKey]bool{}
		}
		d.atMost[c.CallKey] = true
	}
	if d.Hold != nil && d.Hold(c) {
		if d.queued == nil {
			d.queued = map[protocol.CallKey]bool{}
		}
		d.queued[c.CallKey] = true
		return nil
	}
	hctx, cancel := context.WithDeadline(context.Background(), c.Deadline)
	d.running[c.CallKey] = cancel
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		defer func() {
			cancel()
			d.mu.Lock()
			delete(d.running, c.CallKey)
			d.mu.Unlock()
		}()
		if d.Started {
			ib.send(loop.Event{Started: &protocol.Started{V: protocol.Version, RunID: c.RunID, CallKey: c.CallKey, Worker: "looptest", Attempt: 1}})
		}
		res, ok := d.handler(hctx, c)
		if !ok {
			return
		}
		if res.V == 0 {
			res.V = protocol.Version
		}
		if res.RunID == "" {
			res.RunID = c.RunID
		}
		if res.CallKey == "" {
			res.CallKey = c.CallKey
		}
		if res.Outcome == "" {
			res.Outcome = protocol.OutcomeOK
		}
		if res.Worker == "" {
			res.Worker = "looptest"
		}
		if res.Attempt == 0 {
			res.Attempt = c.Attempt
		}
		if d.Durable {
			d.mu.Lock()
			d.stored[c.RunID] = append(d.stored[c.RunID], res)
			ib = d.inboxes[c.RunID]
			d.mu.Unlock()
		}
		ib.send(loop.Event{Result: &res})
	}()
	return nil
}

// Cancel implements [loop.Dispatcher]: it records c and ends the call's
// handler context.
func (d *Dispatcher) Cancel(ctx context.Context, c protocol.Cancel) error {
	if err := c.Validate(); err != nil {
		return fmt.Errorf("looptest: invalid cancel: %w", err)
	}
	d.mu.Lock()
	d.cancels = append(d.cancels, c)
	cancel := d.running[c.CallKey]
	d.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	return nil
}

// Inject delivers ev to run's inbox as if a worker had sent it. It reports
// false if the run has no open inbox, or its inbox is full and dropped ev.
func (d *Dispatcher) Inject(run protocol.RunID, ev loop.Event) bool {
	d.mu.Lock()
	ib := d.inboxes[run]
	d.mu.Unlock()
	return ib != nil && ib.send(ev)
}

// Store adds res to the results stored for run (Durable), after those
// already there, as a stale attempt's result stored late would be: the
// next inbox opened for run delivers it after them.
func (d *Dispatcher) Store(run protocol.RunID, res protocol.Result) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stored == nil {
		d.stored = map[protocol.RunID][]protocol.Result{}
	}
	d.stored[run] = append(d.stored[run], res)
}

// AtMostOnce reports whether the call of key was published
// [loop.Outgoing.AtMostOnce].
func (d *Dispatcher) AtMostOnce(key protocol.CallKey) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.atMost[key]
}

// Asked returns the call keys Withdraw was asked about, in order.
func (d *Dispatcher) Asked() []protocol.CallKey {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]protocol.CallKey(nil), d.asked...)
}

// Withdrawn returns the call keys Withdraw took back, in order.
func (d *Dispatcher) Withdrawn() []protocol.CallKey {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]protocol.CallKey(nil), d.withdrawn...)
}

// withdrawInbox is an inbox of a Dispatcher with Withdrawals.
type withdrawInbox struct {
	*inbox
	d *Dispatcher
}

var _ loop.WithdrawInbox = (*withdrawInbox)(nil)

// Withdraw implements [loop.WithdrawInbox]: it takes back a call Hold keeps
// queued; any other was claimed when its handler started.
func (ib *withdrawInbox) Withdraw(ctx context.Context, key protocol.CallKey) (bool, error) {
	d := ib.d
	d.mu.Lock()
	defer d.mu.Unlock()
	d.asked = append(d.asked, key)
	if d.WithdrawErr != nil {
		return false, d.WithdrawErr
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	if !d.queued[key] {
		return false, nil
	}
	delete(d.queued, key)
	d.withdrawn = append(d.withdrawn, key)
	return true, nil
}

// Published returns the calls published so far.
func (d *Dispatcher) Published() []protocol.Call {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]protocol.Call(nil), d.published...)
}

// Cancels returns the cancels received so far.
func (d *Dispatcher) Cancels() []protocol.Cancel {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]protocol.Cancel(nil), d.cancels...)
}

// Opens counts the inboxes opened.
func (d *Dispatcher) Opens() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.opens
}

// Wait blocks until every handler goroutine has returned.
func (d *Dispatcher) Wait() { d.wg.Wait() }

// inbox is one run's event queue.
type inbox struct {
	ch     chan loop.Event
	done   chan struct{}
	caught chan struct{}
	once   sync.Once
	// mu serialises sends with Close, so no event is queued after it.
	mu      sync.Mutex
	dropped atomic.Int64
}

var _ loop.CatchUpInbox = (*inbox)(nil)

func (ib *inbox) Events() <-chan loop.Event { return ib.ch }

// CaughtUp implements [loop.CatchUpInbox]: the stored results are queued
// before Open returns.
func (ib *inbox) CaughtUp() <-chan struct{} { return ib.caught }

func (ib *inbox) closed() bool {
	select {
	case <-ib.done:
		return true
	default:
		return false
	}
}

func (ib *inbox) Close() error {
	ib.once.Do(func() {
		ib.mu.Lock()
		close(ib.done)
		ib.mu.Unlock()
	})
	return nil
}

// Dropped counts the events dropped because the inbox was full.
func (ib *inbox) Dropped() int64 { return ib.dropped.Load() }

// send queues ev unless the inbox is closed. It never waits: when the
// buffer is full, ev is dropped and counted.
func (ib *inbox) send(ev loop.Event) bool {
	ib.mu.Lock()
	defer ib.mu.Unlock()
	select {
	case <-ib.done:
		return false
	default:
	}
	select {
	case ib.ch <- ev:
		return true
	default:
		ib.dropped.Add(1)
		return false
	}
}

// OK is a successful result with output.
func OK(output string) protocol.Result {
	return protocol.Result{Outcome: protocol.OutcomeOK, Output: output}
}

// Failed is a failed result with an error type.
func Failed(errorType string) protocol.Result {
	return protocol.Result{Outcome: protocol.OutcomeFailed, ErrorType: errorType}
}
