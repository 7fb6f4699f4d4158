package httpapi

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolfleet/toolfleet/internal/natsbus/stores"
	"github.com/toolfleet/toolfleet/pkg/client"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// Kinds of Event, in the order a run's journal has them.
const (
	EventQueued            = "queued"             // the serving coordinator took the request (its limits, client, agent)
	EventStarted           = "started"            // a coordinator took the run (Owner), first or after another
	EventModel             = "model"              // the model answered a round (Content, ToolCalls)
	EventApprovalRequested = "approval_requested" // calls wait for a human (Calls, Deadline)
	EventApprovalDecided   = "approval_decided"   // the gate settled one call (Calls[0])
	EventDispatched        = "dispatched"         // calls went to the workers (Calls with deadlines)
	EventCallStarted       = "call_started"       // a call started on a worker (CallStarted); live, no id
	EventAnswered          = "answered"           // every call of the round is answered (Calls: outcome, observation, worker, duration)
	EventProgress          = "progress"           // a running call's tool said what it does (Progress); no id
	EventFinished          = "finished"           // the run ended (Termination, Answer)
)

// Event is one event of GET /v1/runs/{id}/events: the data of one
// server-sent event, whose "event" field is Kind and whose "id" is ID.
type Event struct {
	Kind string `json:"kind"`
	// ID names the event's place in the run's journal: "<seq>.<n>", the
	// n-th entry (from 0) of the journal message stored at stream
	// sequence seq (a round's entries may be stored as one message). A
	// client's finished event has the ID "result"; progress and
	// call_started, which are live and not journaled, have none.
	ID          string                 `json:"id,omitempty"`
	At          time.Time              `json:"at"`
	Round       int                    `json:"round,omitempty"`
	Owner       string                 `json:"owner,omitempty"`
	Content     string                 `json:"content,omitempty"`
	ToolCalls   []EventToolCall        `json:"tool_calls,omitempty"`
	Calls       []EventCall            `json:"calls,omitempty"`
	Deadline    time.Time              `json:"deadline,omitzero"`
	Progress    *protocol.Progress     `json:"progress,omitempty"`
	CallStarted *protocol.CallStarted  `json:"call_started,omitempty"`
	Termination loop.TerminationReason `json:"termination,omitempty"`
	Answer      string                 `json:"answer,omitempty"`
}

// EventToolCall is one call a model step asked for: its id and tool.
type EventToolCall struct {
	ID   string `json:"id"`
	Name string `json:"name"`
}

// EventCall is one call in an event: dispatched, waiting, decided or
// answered.
type EventCall struct {
	CallKey     protocol.CallKey `json:"call_key,omitempty"`
	Tool        string           `json:"tool,omitempty"`
	Deadline    time.Time        `json:"deadline,omitzero"`
	GateResult  string           `json:"gate_result,omitempty"`
	Outcome     protocol.Outcome `json:"outcome,omitempty"`
	Observation string           `json:"observation,omitempty"`
	Worker      string           `json:"worker,omitempty"`
	DurationMS  int64            `json:"duration_ms,omitempty"`
}

// journalEvent is the event of one journal record, or false for a record
// no viewer needs (the run's secret seed, the tools offered).
func journalEvent(rec stores.JournalRecord, at eventID, tools map[protocol.CallKey]string) (Event, bool) {
	e := rec.Entry
	ev := Event{ID: at.String(), At: rec.Time, Round: e.Round}
	calls := func(cs []loop.JournaledCall) []EventCall {
		out := make([]EventCall, len(cs))
		for i, c := range cs {
			tools[c.CallKey] = c.Tool
			out[i] = EventCall{CallKey: c.CallKey, Tool: c.Tool, Deadline: c.Deadline}
		}
		return out
	}
	switch e.Kind {
	case stores.EntryRequest:
		ev.Kind = EventQueued
	case stores.EntryOwner:
		ev.Kind, ev.Owner = EventStarted, e.Owner
	case loop.EntryModel:
		ev.Kind = EventModel
		if e.Response != nil {
			ev.Content = e.Response.Message.Content
			for _, tc := range e.Response.Message.ToolCalls {
				ev.ToolCalls = append(ev.ToolCalls, EventToolCall{ID: tc.ID, Name: tc.Function.Name})
			}
		}
	case loop.EntryApprovalRequested:
		ev.Kind, ev.Calls, ev.Deadline = EventApprovalRequested, calls(e.Calls), e.Deadline
	case loop.EntryApprovalDecided:
		ev.Kind = EventApprovalDecided
		if d := e.Decision; d != nil {
			ev.Calls = []EventCall{{CallKey: d.CallKey, Tool: tools[d.CallKey], GateResult: d.GateResult, Outcome: d.Outcome}}
		}
	case loop.EntryDispatched:
		ev.Kind, ev.Calls = EventDispatched, calls(e.Calls)
	case loop.EntryObserved:
		ev.Kind = EventAnswered
		for _, o := range e.Observations {
			ev.Calls = append(ev.Calls, EventCall{CallKey: o.CallKey, Tool: tools[o.CallKey], Outcome: o.Outcome,
				Observation: o.Content, Worker: o.Worker, DurationMS: o.DurationMS})
		}
	case loop.EntryFinished:
		ev.Kind, ev.Termination, ev.Answer = EventFinished, e.Termination, e.Answer
	default:
		return Event{}, false
	}
	return ev, true
}

// eventID is an event's place in the journal: the n-th entry of the
// message at stream sequence seq.
type eventID struct{ seq, n uint64 }

func (id eventID) String() string {
	return strconv.FormatUint(id.seq, 10) + "." + strconv.FormatUint(id.n, 10)
}

func (id eventID) after(o eventID) bool { return id.seq > o.seq || (id.seq == o.seq && id.n > o.n) }

// resultID is the ID of a client's finished event.
const resultID = "result"

// parseEventID reads a Last-Event-ID: "<seq>.<n>", or "result" (the
// stream already ended: everything is past it).
func parseEventID(s string) (eventID, bool) {
	if s == resultID {
		return eventID{seq: ^uint64(0), n: ^uint64(0)}, true
	}
	seq, n, ok := strings.Cut(s, ".")
	if !ok {
		return eventID{}, false
	}
	a, err1 := strconv.ParseUint(seq, 10, 64)
	b, err2 := strconv.ParseUint(n, 10, 64)
	id := eventID{a, b}
	return id, err1 == nil && err2 == nil && id.String() == s // only as the API prints it
}

// events streams run's events as server-sent events: from the journal
// for a user who reads it (every event after Last-Event-ID, then each as
// it is stored, until the run finishes), else — a client — its run's
// result; for both, the run's progress and its calls' starts as they
// come (live: a reconnected stream gets none it missed).
func (s *Server) events(ctx context.Context, w http.ResponseWriter, r *http.Request, ss *session) {
	run, e := runID(r, "id")
	if e != nil {
		s.fail(w, r, e, nil)
		return
	}
	var after eventID
	resumed := false
	if v := r.Header.Get("Last-Event-ID"); v != "" {
		id, ok := parseEventID(v)
		if !ok {
			s.fail(w, r, badField("Last-Event-ID", "Last-Event-ID must be an event id this stream sent"), nil)
			return
		}
		after, resumed = id, true
	}
	release, e := s.takeStream(w, ss)
	if e != nil {
		s.fail(w, r, e, nil)
		return
	}
	defer release()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	out := make(chan []byte, s.cfg.StreamBuffer)
	send := func(ev Event) bool {
		select {
		case out <- sse(ev.Kind, ev.ID, ev):
			return true
		default:
			cancel(errBehind)
			return false
		}
	}
	// The journal, if this user reads it; the probe's refusal ends the
	// probe, and a client then gets its own run's progress and result.
	probe, endProbe := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	recs, err := stores.ReadJournalFrom(probe, ss.rd, s.subjects, run, 0)
	endProbe()
	done := make(chan struct{})
	switch {
	case err == nil:
		// The live events of a run already taken are followed before the
		// stream's first line is written: what comes after it is seen.
		live := make(chan *nats.Msg, s.cfg.StreamBuffer)
		var sub *nats.Subscription
		client, _, named := requestOf(recs)
		if named {
			sub = s.subscribeLive(ctx, ss, client, run, live)
		}
		go func() {
			defer close(done)
			s.followJournal(ctx, ss, run, recs, after, resumed, liveFollow{live, sub, named}, send)
		}()
	case fromNATS(ctx, err) == forbidden || errors.Is(context.Cause(ctx), errRefused):
		// The refusal ended the session's request context: the stream goes
		// on with the connection's.
		ctx, cancel = context.WithCancelCause(r.Context())
		defer cancel(nil)
		if e := s.followResult(ctx, ss, run, resumed && after.seq == ^uint64(0), send, done); e != nil {
			s.fail(w, r, e, nil)
			return
		}
	default:
		s.fail(w, r, fromNATS(ctx, err), err)
		return
	}
	defer func() { cancel(nil); <-done }()
	s.writeEvents(ctx, w, out, done)
}

// liveFollow is a journal reader's subscription to its run's progress
// subject: sub (nil when none), its messages on live; named once the
// journal has named the run's client (and the subscription was asked).
type liveFollow struct {
	live  chan *nats.Msg
	sub   *nats.Subscription
	named bool
}

// followJournal sends each journal event of run after after (recs, the
// journal read so far, first), reading what is stored next every
// PollInterval with direct gets (no consumer), and the live events of
// lf (subscribed here once the journal names the run's client, if it
// had not), until the run finishes or ctx ends.
func (s *Server) followJournal(ctx context.Context, ss *session, run protocol.RunID, recs []stores.JournalRecord, after eventID, resumed bool,
	lf liveFollow, send func(Event) bool) {
	defer func() {
		if lf.sub != nil {
			_ = lf.sub.Unsubscribe()
		}
	}()
	tools := map[protocol.CallKey]string{}
	var at eventID
	tick := time.NewTicker(s.cfg.PollInterval)
	defer tick.Stop()
	for {
		if !lf.named {
			var client string
			if client, _, lf.named = requestOf(recs); lf.named {
				lf.sub = s.subscribeLive(ctx, ss, client, run, lf.live)
			}
		}
		for _, rec := range recs {
			if rec.Seq == at.seq {
				at.n++
			} else {
				at = eventID{seq: rec.Seq}
			}
			ev, ok := journalEvent(rec, at, tools)
			if !ok || (resumed && !at.after(after)) {
				continue
			}
			if !send(ev) || ev.Kind == EventFinished {
				return
			}
		}
		if !s.sendLive(ctx, tick.C, lf.live, run, send) {
			return
		}
		var err error
		if recs, err = stores.ReadJournalFrom(ctx, ss.rd, s.subjects, run, at.seq+1); err != nil {
			return
		}
	}
}

// followResult sends a client's run's live events and, once stored, its
// result as the finished event (its id the word "result"; not again when
// ended is set: the viewer had it), then ends.
func (s *Server) followResult(ctx context.Context, ss *session, run protocol.RunID, ended bool, send func(Event) bool, done chan struct{}) *apiError {
	progressSubject, err := s.subjects.ClientRunProgress(ss.user, run)
	if err != nil {
		return badField("id", "the run id does not make a subject")
	}
	resultSubject, err := s.subjects.ClientRunResult(ss.user, run)
	if err != nil {
		return badField("id", "the run id does not make a subject")
	}
	msgs := make(chan *nats.Msg, s.cfg.StreamBuffer)
	sub, err := ss.nc.ChanSubscribe(progressSubject, msgs)
	if err != nil {
		return fromNATS(ctx, err)
	}
	// The server has the interest before the stream's first line.
	_ = ss.nc.FlushWithContext(ctx)
	results := make(chan *protocol.RunResult, 1)
	go func() {
		res, _ := ss.cl.Wait(ctx, client.Run{ID: run, Key: protocol.RunKey(ss.user, run), Subject: resultSubject})
		results <- res
	}()
	go func() {
		defer close(done)
		defer sub.Unsubscribe()
		for {
			select {
			case <-ctx.Done():
				return
			case m := <-msgs:
				if ev, ok := liveEvent(m.Data, run, s.cfg.Now()); ok && !send(ev) {
					return
				}
			case res := <-results:
				if res != nil && !ended {
					send(Event{Kind: EventFinished, ID: resultID, At: res.FinishedAt, Termination: loop.TerminationReason(res.TerminationReason), Answer: res.Answer})
				}
				return
			}
		}
	}()
	return nil
}

// sendLive sends the events of live's messages until tick ticks (true),
// or ctx ends or a send fails (false).
func (s *Server) sendLive(ctx context.Context, tick <-chan time.Time, live chan *nats.Msg, run protocol.RunID, send func(Event) bool) bool {
	for {
		select {
		case <-ctx.Done():
			return false
		case <-tick:
			return true
		case m := <-live:
			if ev, ok := liveEvent(m.Data, run, s.cfg.Now()); ok && !send(ev) {
				return false
			}
		}
	}
}

// maxLiveBytes bounds one message of a run's progress subject.
const maxLiveBytes = protocol.MaxProgressBytes * 4

// liveEvent is the event of one message of run's progress subject: a
// progress report (at now) or a call's start (at its time), or false for
// anything else.
func liveEvent(data []byte, run protocol.RunID, now time.Time) (Event, bool) {
	if p, err := protocol.DecodeProgress(data, maxLiveBytes); err == nil && p.RunID == run {
		return Event{Kind: EventProgress, At: now.UTC(), Progress: &p}, true
	}
	if c, err := protocol.DecodeCallStarted(data, maxLiveBytes); err == nil && c.RunID == run {
		return Event{Kind: EventCallStarted, At: c.StartedAt.UTC(), CallStarted: &c}, true
	}
	return Event{}, false
}

// subscribeLive subscribes ss to the progress subject of client's run
// (its reports and its calls' starts), the messages going to live, and
// returns once the server has the interest; nil when it could not, or
// the run names no client (the viewer may not read the subject of such
// a run: a refusal would end the session's requests in flight).
func (s *Server) subscribeLive(ctx context.Context, ss *session, client string, run protocol.RunID, live chan *nats.Msg) *nats.Subscription {
	if client == "" {
		return nil
	}
	subject, err := s.subjects.ClientRunProgress(client, run)
	if err != nil {
		return nil
	}
	sub, err := ss.nc.ChanSubscribe(subject, live)
	if err != nil {
		return nil
	}
	_ = ss.nc.FlushWithContext(ctx)
	return sub
}
