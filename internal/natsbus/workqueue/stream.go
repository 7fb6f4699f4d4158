package workqueue

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/natsbus"
)

// A streamed queue keeps its subscriptions for the life of Run and sends
// its pull requests on them, each sized to the slots the queue holds for
// it, instead of a subscription per pull: a slot that frees asks for its
// next message at once, while other requests are still out. A request is
// out on a subscription of its own (the server delivers a request's
// messages and its end, a 404, 408 or 409 status, to the request's reply
// subject), so every message is counted against the request it answers,
// and the slots a request did not fill go back when it ends; the
// subscription then serves the queue's next request. The queue makes a
// new subscription only when every one it has carries a request: as many
// as its requests out at once, at most its slots. It still never takes a
// message without a free slot for it.
//
// While messages wait, a request takes what is there without waiting
// (no_wait) for up to MaxFetchBatch free slots. When one finds nothing,
// the queue goes idle: it keeps one request waiting in the server, for one
// message and for up to PollWait, and holds only that one slot, so an idle
// tool leaves the worker's other slots to its other tools. A message for
// that request ends the idleness.
//
// A request whose end never comes is given up lostAfter past its expiry,
// and every request out is given up when the connection is made again
// (the server that held it restarted, or another serves the connection):
// its slots go back, and a message that still arrives for it is handed
// back (nak), never run without a slot. A request the server refuses (a
// 409 other than the consumer's end: too many requests waiting, a
// leadership change) makes the queue pause before its next one, growing
// while refusals follow one another with no other answer between them.
//
// When Run's context ends the queue sends nothing more, hands back what
// still arrives, and returns once every request has ended or was given up
// (all of them at once while the connection is down), so the server sends
// nothing to a stopped queue.

// lostAfter is how long past its expiry (a no-wait request: past its
// sending) a request's end may take before the queue gives it up.
const lostAfter = 5 * time.Second

// pullRequest is the body of a CONSUMER.MSG.NEXT request.
type pullRequest struct {
	Batch   int           `json:"batch"`
	Expires time.Duration `json:"expires,omitempty"`
	NoWait  bool          `json:"no_wait,omitempty"`
}

// pullSub is a subscription of a streamed queue and the request out on
// it.
type pullSub struct {
	sub *nats.Subscription
	req *request // nil: free for the next request
	// retired: its request was given up; a message that still comes is
	// handed back, and the subscription carries no other request. It ends
	// lostAfter later.
	retired   bool
	retiredAt time.Time
}

// request is one pull request still out.
type request struct {
	left     int // slots held for it that no message filled yet
	took     int
	wait     bool
	giveUpAt time.Time
}

// streamer is the state of a streamed queue's Run.
type streamer struct {
	q       *WorkQueue
	nc      *nats.Conn
	next    string // the consumer's CONSUMER.MSG.NEXT subject
	execCtx context.Context
	idleCh  chan jetstream.Msg

	mu       sync.Mutex
	subs     []*pullSub // every subscription made
	free     []*pullSub // those with no request out
	idle     bool       // the last no-wait request found nothing
	waiting  bool       // the idle state's waiting request is out
	lost     bool       // the server said the consumer is gone
	refused  bool       // the server refused a request (a 409) since the loop last looked
	refusals int        // the requests it refused in a row, with no other answer between
	changed  chan struct{}
	stopping bool
	// handing counts the messages being handed to a handler: Run waits
	// for them before it closes the handlers' channel.
	handing sync.WaitGroup
}

// runStreamed is Run for a queue with a JetStream context (cfg.JS) and no
// IdlePoll.
func (q *WorkQueue) runStreamed(ctx, execCtx context.Context) {
	idle := make(chan jetstream.Msg)
	defer close(idle)
	s := &streamer{
		q: q, nc: q.cfg.JS.Conn(), execCtx: execCtx, idleCh: idle, changed: make(chan struct{}),
	}
	s.setConsumer()
	defer s.unsubscribe()
	sweep := time.NewTicker(q.cfg.PollWait)
	defer sweep.Stop()
	// A reconnection loses the requests out: the server that held them
	// restarted, or another one serves the connection now.
	reconnected := s.nc.StatusChanged(nats.CONNECTED)
	defer s.nc.RemoveStatusListener(reconnected)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-sweep.C:
				s.giveUp(now, false)
			case <-reconnected:
				s.giveUp(time.Now(), true)
			}
		}
	}()
	s.loop(ctx)
	s.stop()
}

// setConsumer points the requests at the queue's current consumer.
func (s *streamer) setConsumer() {
	info := s.q.cons.CachedInfo()
	s.next = natsbus.APIPrefix(s.q.cfg.JS) + "CONSUMER.MSG.NEXT." + info.Stream + "." + info.Name
}

// loop sends requests while ctx lasts, one per slot it gets (or per
// MaxFetchBatch of them while messages wait).
func (s *streamer) loop(ctx context.Context) {
	q := s.q
	failures := 0
	for {
		if q.cfg.Wait != nil {
			if err := q.cfg.Wait(ctx); err != nil {
				return
			}
		}
		s.mu.Lock()
		lost, refused, refusals, idle, waiting, changed := s.lost, s.refused, s.refusals, s.idle, s.waiting, s.changed
		s.lost, s.refused = false, false
		s.mu.Unlock()
		// The count of refusals in a row is kept where the answers arrive:
		// the loop is back here before the answer to the request it just
		// sent, so it cannot tell from its own turns whether refusals
		// follow one another.
		if refused && !natsbus.SleepCtx(ctx, natsbus.Backoff(refusals)) {
			return
		}
		if lost {
			if err := q.Ensure(ctx); err != nil {
				failures++
				q.limited.Warn().Err(err).Int("failures", failures).Msg("re-creating the consumer failed; retrying")
				if !natsbus.SleepCtx(ctx, natsbus.Backoff(failures)) {
					return
				}
				s.mu.Lock()
				s.lost = true
				s.mu.Unlock()
				continue
			}
			s.setConsumer()
		}
		if idle && waiting {
			// One request waits in the server already: wait for it.
			select {
			case <-changed:
			case <-ctx.Done():
				return
			}
			continue
		}
		limit, again, ok := q.admitOne(ctx)
		if !ok {
			return
		}
		if again {
			continue
		}
		// The state may have changed while the slot was awaited.
		s.mu.Lock()
		idle, waiting = s.idle, s.waiting
		s.mu.Unlock()
		if idle && waiting {
			q.cfg.Slots.Release(1)
			continue
		}
		slots := 1
		for !idle && slots < limit && q.cfg.Slots.TryAcquire(1) {
			slots++
		}
		if err := s.send(slots, idle); err != nil {
			q.cfg.Slots.Release(int64(slots))
			failures++
			q.limited.Warn().Err(err).Int("failures", failures).Msg("pulling " + q.cfg.Noun + " failed; retrying")
			if !natsbus.SleepCtx(ctx, natsbus.Backoff(failures)) {
				return
			}
			continue
		}
		failures = 0
	}
}

// send sends a request for slots messages, for which the caller holds
// slots: a waiting one (for one message, up to PollWait) when wait, else
// a no-wait one.
func (s *streamer) send(slots int, wait bool) error {
	req := pullRequest{Batch: slots, NoWait: !wait}
	giveUp := time.Now().Add(lostAfter)
	if wait {
		req.Expires = s.q.cfg.PollWait
		giveUp = giveUp.Add(s.q.cfg.PollWait)
	}
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	ps, err := s.freeSub()
	if err != nil {
		return err
	}
	s.mu.Lock()
	ps.req = &request{left: slots, wait: wait, giveUpAt: giveUp}
	if wait {
		s.waiting = true
	}
	s.mu.Unlock()
	s.q.pullCount.Add(1)
	if err := s.nc.PublishRequest(s.next, ps.sub.Subject, body); err != nil {
		s.mu.Lock()
		ps.req = nil
		s.free = append(s.free, ps)
		if wait {
			s.waiting = false
		}
		s.mu.Unlock()
		return err
	}
	return nil
}

// freeSub returns a subscription with no request out, made when none is.
func (s *streamer) freeSub() (*pullSub, error) {
	s.mu.Lock()
	if n := len(s.free); n > 0 {
		ps := s.free[n-1]
		s.free = s.free[:n-1]
		s.mu.Unlock()
		return ps, nil
	}
	s.mu.Unlock()
	ps := &pullSub{}
	sub, err := s.nc.Subscribe(s.nc.NewInbox(), func(m *nats.Msg) { s.receive(ps, m) })
	if err != nil {
		return nil, err
	}
	ps.sub = sub
	s.mu.Lock()
	s.subs = append(s.subs, ps)
	s.mu.Unlock()
	return ps, nil
}

// unsubscribe ends every subscription of the queue.
func (s *streamer) unsubscribe() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ps := range s.subs {
		ps.sub.Unsubscribe()
	}
}

// end ends ps's request r: the slots it did not fill go back and ps
// serves the next request.
func (s *streamer) endLocked(ps *pullSub, r *request) {
	s.q.cfg.Slots.Release(int64(r.left))
	r.left = 0
	ps.req = nil
	if r.wait {
		s.waiting = false
	}
	if !ps.retired {
		s.free = append(s.free, ps)
	}
	s.signalLocked()
}

// receive takes one message of ps: a message of the consumer, run in the
// slot its request holds, or the end of the request.
func (s *streamer) receive(ps *pullSub, m *nats.Msg) {
	status := m.Header.Get("Status")
	if status == "100" { // an idle heartbeat: none is asked for
		return
	}
	s.mu.Lock()
	r := ps.req
	if status != "" || !strings.HasPrefix(m.Reply, "$JS.ACK.") {
		// The request ended: the server's status, or the API's error
		// answer to it (no such consumer or stream).
		if r != nil {
			if r.took == 0 && !r.wait {
				s.idle = true
			}
			s.endLocked(ps, r)
		}
		switch {
		case status == "" || (status == "409" && consumerGone(m.Header.Get("Description"))):
			s.lost = true
			s.refusals = 0
			s.signalLocked()
		case status == "409":
			s.refused = true
			s.refusals++
		default:
			s.refusals = 0
		}
		s.mu.Unlock()
		if r != nil && r.took == 0 && s.q.cfg.Pulled != nil {
			s.q.cfg.Pulled(0, 0)
		}
		return
	}
	if r == nil || s.stopping {
		// A message of a request given up, or arriving while the queue
		// stops: it has no slot, so it goes back at once.
		if r != nil {
			r.left--
			s.q.cfg.Slots.Release(1)
			if r.left == 0 {
				s.endLocked(ps, r)
			}
		}
		s.mu.Unlock()
		m.Nak()
		return
	}
	r.left--
	r.took++
	s.refusals = 0
	if r.left == 0 {
		s.endLocked(ps, r)
	}
	if s.idle {
		s.idle = false
		s.signalLocked()
	}
	s.handing.Add(1)
	s.mu.Unlock()
	defer s.handing.Done()
	s.q.pulledCount.Add(1)
	msg := &pulledMsg{m: m}
	s.q.pulled([]jetstream.Msg{msg})
	s.q.cfg.InFlight.Add(1)
	s.q.hand(s.execCtx, msg, s.idleCh)
}

// signalLocked wakes a loop waiting for the state to change.
func (s *streamer) signalLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// giveUp gives up the requests whose end is overdue at now, or all of
// them; their subscriptions carry no other request, and end lostAfter
// later.
func (s *streamer) giveUp(now time.Time, all bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	kept := s.subs[:0]
	for _, ps := range s.subs {
		if r := ps.req; r != nil && (all || !now.Before(r.giveUpAt)) {
			ps.retired, ps.retiredAt = true, now
			s.endLocked(ps, r)
		}
		if ps.retired && now.Sub(ps.retiredAt) >= lostAfter {
			ps.sub.Unsubscribe()
			continue
		}
		kept = append(kept, ps)
	}
	clear(s.subs[len(kept):])
	s.subs = kept
}

// stop hands back what arrives from now on and waits, up to the longest
// request's give-up time, for every request still out to end. Without a
// connection none can end (and none can deliver): it gives them all up.
func (s *streamer) stop() {
	s.mu.Lock()
	s.stopping = true
	s.mu.Unlock()
	down := s.nc.StatusChanged(nats.DISCONNECTED, nats.RECONNECTING, nats.CLOSED)
	defer s.nc.RemoveStatusListener(down)
	defer s.handing.Wait()
	for {
		if !s.nc.IsConnected() {
			s.giveUp(time.Now(), true)
			return
		}
		s.mu.Lock()
		var last time.Time
		for _, ps := range s.subs {
			if ps.req != nil {
				last = maxTime(last, ps.req.giveUpAt)
			}
		}
		changed := s.changed
		s.mu.Unlock()
		if last.IsZero() {
			return
		}
		wait := time.Until(last)
		if wait <= 0 {
			s.giveUp(time.Now(), false)
			return
		}
		t := time.NewTimer(wait)
		select {
		case <-changed:
		case <-down:
		case <-t.C:
		}
		t.Stop()
	}
}

// consumerGone reports whether a 409's description says the consumer no
// longer serves pulls.
func consumerGone(desc string) bool {
	desc = strings.ToLower(desc)
	return strings.Contains(desc, "consumer deleted") || strings.Contains(desc, "push based")
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// errNoReply is what settling a message without a reply subject returns.
var errNoReply = errors.New("workqueue: the message has no reply subject")

// pulledMsg is a consumer's message received on a streamed queue's
// subscription, as a [jetstream.Msg]: its acknowledgements go to its reply
// subject, as the server asks.
type pulledMsg struct{ m *nats.Msg }

var _ jetstream.Msg = (*pulledMsg)(nil)

func (p *pulledMsg) Metadata() (*jetstream.MsgMetadata, error) {
	md, err := p.m.Metadata()
	if err != nil {
		return nil, err
	}
	return &jetstream.MsgMetadata{
		Sequence:     jetstream.SequencePair{Consumer: md.Sequence.Consumer, Stream: md.Sequence.Stream},
		NumDelivered: md.NumDelivered,
		NumPending:   md.NumPending,
		Timestamp:    md.Timestamp,
		Stream:       md.Stream,
		Consumer:     md.Consumer,
		Domain:       md.Domain,
	}, nil
}

func (p *pulledMsg) Data() []byte         { return p.m.Data }
func (p *pulledMsg) Headers() nats.Header { return p.m.Header }
func (p *pulledMsg) Subject() string      { return p.m.Subject }
func (p *pulledMsg) Reply() string        { return p.m.Reply }
func (p *pulledMsg) Ack() error           { return p.m.Ack() }
func (p *pulledMsg) Nak() error           { return p.m.Nak() }
func (p *pulledMsg) InProgress() error    { return p.m.InProgress() }
func (p *pulledMsg) Term() error          { return p.m.Term() }

func (p *pulledMsg) DoubleAck(ctx context.Context) error { return p.m.AckSync(nats.Context(ctx)) }

func (p *pulledMsg) NakWithDelay(delay time.Duration) error { return p.m.NakWithDelay(delay) }

// TermWithReason terminates the message with reason, which the server
// reports in its advisory.
func (p *pulledMsg) TermWithReason(reason string) error {
	if p.m.Reply == "" || p.m.Sub == nil {
		return errNoReply
	}
	return p.m.Respond([]byte("+TERM " + reason))
}
