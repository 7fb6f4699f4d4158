package dispatch

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natsbus/admission"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// Fair shares per client.
//
// A call is published on <prefix>.call.<tool>.<class>.<client>
// ([protocol.Subjects.Call]). The calls stream holds at most
// max_msgs_per_subject messages per subject and, with
// discard_new_per_subject, refuses a publish beyond that: each client may
// have at most that many calls of a tool, per class, queued or running
// (a non-idempotent call leaves the stream when a worker claims it, so
// only its queued time counts). The server enforces the cap fleet-wide,
// across every coordinator, and a crash leaks nothing: the count is the
// stream's own.
//
// A call the stream refuses for its subject's cap is held by the
// [Dispatcher] that published it, in a queue per subject, and published
// again — the queue's head only, with a backoff from 10ms to
// shareRetryMax — until the stream takes it (then the next one at once)
// or its deadline is near (less than a quarter of its timeout left, at
// most shareGiveUpMax): then the run's inbox is answered rate_limited at
// once, with the time it waited as the time to try again, and the call is
// never published. Either way the call is answered once: by its worker, or
// by the Dispatcher, never both.
//
// What it bounds: the tool's consumer is first in, first out, so a call of
// another client waits behind at most cap calls of each client that
// floods, whatever those clients submitted — not behind their whole
// backlog.

const (
	// shareRetryMin and shareRetryMax bound the pause between two
	// attempts to publish a held call.
	shareRetryMin = 10 * time.Millisecond
	shareRetryMax = 500 * time.Millisecond
	// shareGiveUpMax bounds how long before its deadline a held call is
	// answered rate_limited.
	shareGiveUpMax = 2 * time.Second
	// TerminatedClientShare is the reason, in logs and metrics, of a call
	// answered rate_limited because its client's share of the tool stayed
	// full until its deadline was near.
	TerminatedClientShare = "client_share"
)

// Route sets the client and class of run's calls until the returned
// forget is called; without one, a run's calls are the default client's,
// interactive. An invalid client or class is refused.
func (d *Dispatcher) Route(run protocol.RunID, r admission.Route) (forget func(), err error) {
	if r.Client == "" {
		r.Client = protocol.DefaultClient
	}
	if r.Class == "" {
		r.Class = protocol.ClassInteractive
	}
	if !protocol.ValidToken(r.Client) {
		return nil, &protocol.Error{Code: protocol.CodeInvalidField, Field: "client", Msg: "must match " + protocol.TokenPattern}
	}
	if !r.Class.Valid() {
		return nil, &protocol.Error{Code: protocol.CodeInvalidField, Field: "class", Msg: `must be "interactive" or "batch"`}
	}
	d.routes.Store(run, r)
	return func() { d.routes.CompareAndDelete(run, r) }, nil
}

// route returns run's route.
func (d *Dispatcher) route(run protocol.RunID) admission.Route {
	if v, ok := d.routes.Load(run); ok {
		return v.(admission.Route)
	}
	return admission.Route{Client: protocol.DefaultClient, Class: protocol.ClassInteractive}
}

// heldCall is a call waiting in its Dispatcher for its client's share.
type heldCall struct {
	msg        *nats.Msg
	call       protocol.Call
	atMostOnce bool
	since      time.Time
	giveUp     time.Time
}

// shares holds a Dispatcher's calls refused for their client's share, by
// subject.
type shares struct {
	d       *Dispatcher
	ctx     context.Context
	stop    context.CancelFunc
	mu      sync.Mutex
	queues  map[string][]*heldCall
	workers sync.WaitGroup
}

func newShares(d *Dispatcher) *shares {
	ctx, stop := context.WithCancel(context.Background())
	return &shares{d: d, ctx: ctx, stop: stop, queues: make(map[string][]*heldCall)}
}

// close stops retrying; held calls are dropped unanswered (their runs'
// inboxes are closing: a run resumed elsewhere publishes them again).
func (s *shares) close() {
	s.mu.Lock()
	s.stop()
	s.mu.Unlock()
	s.workers.Wait()
}

// waiting reports whether calls are held for subject: a new call on it
// joins them rather than overtake them.
func (s *shares) waiting(subject string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queues[subject]) > 0
}

// hold queues a call the stream refused (or that must wait behind those
// it refused) for another attempt.
func (s *shares) hold(msg *nats.Msg, o loop.Outgoing) {
	call := o.Call
	now := time.Now()
	timeout := call.Deadline.Sub(now)
	margin := min(max(timeout/4, 0), shareGiveUpMax)
	h := &heldCall{msg: msg, call: call, atMostOnce: o.AtMostOnce, since: now, giveUp: call.Deadline.Add(-margin)}
	if o := s.d.cfg.ShareObserver; o != nil {
		o.CallHeld(call.Tool, s.d.route(call.RunID).Client)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ctx.Err() != nil {
		return // closed: the run's inbox is closing too
	}
	q := s.queues[msg.Subject]
	s.queues[msg.Subject] = append(q, h)
	if len(q) == 0 {
		s.workers.Add(1)
		go s.drain(msg.Subject)
	}
}

// drain publishes the calls held for subject, oldest first, until none is
// left.
func (s *shares) drain(subject string) {
	defer s.workers.Done()
	failures := 0
	for {
		s.mu.Lock()
		q := s.queues[subject]
		if len(q) == 0 || s.ctx.Err() != nil {
			delete(s.queues, subject)
			s.mu.Unlock()
			return
		}
		h := q[0]
		s.mu.Unlock()
		if !time.Now().Before(h.giveUp) || !s.d.open(h.call.RunID) {
			s.pop(subject)
			s.answerLimited(h)
			continue
		}
		pctx, cancel := context.WithTimeout(s.ctx, natsbus.PublishAttemptTimeout)
		ack, err := s.d.js.PublishMsg(pctx, h.msg)
		cancel()
		if err == nil {
			s.pop(subject)
			failures = 0
			if h.atMostOnce {
				s.d.storedSeq(h.call, ack)
			}
			continue
		}
		if !admission.OverShare(err) && !natsbus.Transient(err) {
			// The stream refused it for another reason (full, gone):
			// answered at its deadline by the loop, as any call whose
			// result never comes.
			s.pop(subject)
			s.d.log.Warn().Err(err).Str(natsbus.LogSubject, subject).Msg("a held call could not be published")
			continue
		}
		failures++
		wait := min(shareRetryMin<<min(failures-1, 6), shareRetryMax)
		if !natsbus.SleepCtx(s.ctx, min(wait, max(time.Until(h.giveUp), time.Millisecond))) {
			continue // stopping: the loop's top returns
		}
	}
}

// pop removes the head of subject's queue.
func (s *shares) pop(subject string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if q := s.queues[subject]; len(q) > 0 {
		q[0] = nil
		s.queues[subject] = q[1:]
	}
}

// answerLimited answers a held call rate_limited in its run's inbox.
func (s *shares) answerLimited(h *heldCall) {
	waited := time.Since(h.since)
	if o := s.d.cfg.ShareObserver; o != nil {
		o.CallShareLimited(h.call.Tool, s.d.route(h.call.RunID).Client)
	}
	v, ok := s.d.inboxes.Load(h.call.RunID)
	if !ok {
		return
	}
	r := protocol.Result{
		V: protocol.Version, RunID: h.call.RunID, CallKey: h.call.CallKey, Outcome: protocol.OutcomeRateLimited,
		ErrorType: TerminatedClientShare, RetryAfterMS: max(waited.Milliseconds(), 1000),
	}
	v.(*Inbox).deliver(loop.Event{Result: &r, Tool: h.call.Tool})
}

// open reports whether run has an open inbox here.
func (d *Dispatcher) open(run protocol.RunID) bool {
	_, ok := d.inboxes.Load(run)
	return ok
}

// callSubjects returns the subject of call, under its run's route, and
// the subject its result must come on. in, the run's inbox (nil: none
// open), keeps the last pair it returned, for the tool and route they
// were built for: a round's calls are mostly to one tool, and each would
// build the same two subjects again.
func (d *Dispatcher) callSubjects(in *Inbox, call *protocol.Call) (subject, replyTo string, err error) {
	r := d.route(call.RunID)
	if in != nil {
		if s, ok := in.lastSubjects.get(call.Tool, r); ok {
			return s.call, s.replyTo, nil
		}
	}
	if subject, err = d.subjects.Call(call.Tool, r.Class, r.Client); err != nil {
		return "", "", err
	}
	if replyTo, err = d.subjects.Result(call.RunID, call.Tool); err != nil {
		return "", "", err
	}
	if in != nil {
		in.lastSubjects.set(callSubjects{tool: call.Tool, route: r, call: subject, replyTo: replyTo})
	}
	return subject, replyTo, nil
}

// callSubjects are the subjects of a run's calls to tool under route:
// where they are published, and where their results must come.
type callSubjects struct {
	tool          protocol.ToolName
	route         admission.Route
	call, replyTo string
}

// lastSubjects holds the callSubjects an inbox's run built last.
type lastSubjects struct {
	mu   sync.Mutex
	last callSubjects
}

// get returns the subjects kept, when they are tool's under route.
func (l *lastSubjects) get(tool protocol.ToolName, route admission.Route) (callSubjects, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.last.call == "" || l.last.tool != tool || l.last.route != route {
		return callSubjects{}, false
	}
	return l.last, true
}

func (l *lastSubjects) set(s callSubjects) {
	l.mu.Lock()
	l.last = s
	l.mu.Unlock()
}

// publishOrHold publishes msg unless calls are held for its subject, and
// holds it when the stream refuses it for its client's share. held is
// true when the call was held (it is then answered once, by its worker or
// rate_limited, without more from the caller).
func (d *Dispatcher) publishOrHold(ctx context.Context, msg *nats.Msg, o loop.Outgoing) (ack *jetstream.PubAck, held bool, err error) {
	if d.shares.waiting(msg.Subject) {
		d.shares.hold(msg, o)
		return nil, true, nil
	}
	ack, err = natsbus.PublishRetrying(ctx, d.js, msg)
	if err != nil && admission.OverShare(err) {
		d.shares.hold(msg, o)
		return nil, true, nil
	}
	return ack, false, err
}
