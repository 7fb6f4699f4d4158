package client

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolfleet/toolfleet/internal/natsbus/stores"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// progressBuffer bounds the progress reports a run watch holds before its
// caller reads them; a slow caller loses the rest, as reports may be lost.
const progressBuffer = 256

// RunEventKind says what a [RunEvent] reports.
type RunEventKind string

// The kinds of run events.
const (
	// RunProgress: a running call's tool reported what it is doing
	// ([RunEvent.Progress]).
	RunProgress RunEventKind = "progress"
	// RunAnswered: every call of a round is answered
	// ([RunEvent.Calls]), before the model is asked again.
	RunAnswered RunEventKind = "answered"
	// RunFinished: the run ended ([RunEvent.Termination],
	// [RunEvent.Answer]); its result is stored right after.
	RunFinished RunEventKind = "finished"
)

// RunEvent is one thing that happened in a run, as [Client.WatchRun]
// delivers it.
type RunEvent struct {
	// Kind says what happened, and which fields below are set.
	Kind RunEventKind
	// At is when the journal stored the step, or when the progress report
	// arrived.
	At time.Time
	// Round is the round the event belongs to, from 1 (0 for progress).
	Round int
	// Progress is the report of a RunProgress event: untrusted text a
	// tool wrote, made safe to print by the serving coordinator.
	Progress *protocol.Progress
	// Calls are the answers of a RunAnswered event, one per call of the
	// round within its cap, in the order the model made them.
	Calls []CallAnswer
	// Termination is why a RunFinished run ended.
	Termination loop.TerminationReason
	// Answer is a RunFinished run's final answer.
	Answer string
}

// CallAnswer is how one call of a round was answered, as the run's
// journal holds it.
type CallAnswer struct {
	// CallKey is the coordinator's key for the call (its subjects, its
	// approval request); empty for a call that got none.
	CallKey protocol.CallKey
	// Tool is the tool the call was dispatched to or asked approval for;
	// empty for a call that was neither (an unknown tool, bad arguments).
	Tool string
	// Outcome is how the call ended.
	Outcome protocol.Outcome
	// Observation is what the model reads for it: the tool's output or
	// the loop's text for the outcome ([loop.OutcomeTexts]).
	Observation string
	// Worker names the worker that ran it, if one did.
	Worker string
	// Duration is the coordinator's time from the call's handling to its
	// answer.
	Duration time.Duration
}

// WatchRun returns run's events: each round's answered calls and the
// run's end, read from its journal from the first entry (so a run that
// ended before the call gives its whole history), and the progress of its
// calls as its serving coordinator passes them on. The iteration ends
// after RunFinished, when the loop over it stops, or when ctx ends (then
// it yields ctx's error, once).
//
// It is served by one consumer on the run's journal and a subscription to
// the run's progress subject: nothing is polled. It needs a
// coordinator's permissions for both; the operator's read the journal but
// get no progress reports; a client's account reads no journal (its
// progress and result: [Client.Wait]).
func (c *Client) WatchRun(ctx context.Context, run protocol.RunID) iter.Seq2[RunEvent, error] {
	return func(yield func(RunEvent, error) bool) {
		if !run.Valid() {
			yield(RunEvent{}, fmt.Errorf("client: run id %q must match %s", run, protocol.TokenPattern))
			return
		}
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		w, err := stores.WatchJournal(ctx, c.js, c.subjects, run)
		if err != nil {
			yield(RunEvent{}, fmt.Errorf("client: watching run %s: %w", run, err))
			return
		}
		defer w.Stop()
		type next struct {
			rec stores.JournalRecord
			err error
		}
		entries := make(chan next)
		done := make(chan struct{})
		defer func() { cancel(); <-done }()
		go func() {
			defer close(done)
			for {
				rec, err := w.Next(ctx)
				select {
				case entries <- next{rec, err}:
				case <-ctx.Done():
					return
				}
				if err != nil {
					return
				}
			}
		}()
		progress := make(chan *nats.Msg, progressBuffer)
		tools := map[protocol.CallKey]string{}
		var following *nats.Subscription
		for {
			select {
			case <-ctx.Done():
				yield(RunEvent{}, fmt.Errorf("client: watching run %s: %w", run, context.Cause(ctx)))
				return
			case m := <-progress:
				p, err := protocol.DecodeProgress(m.Data, protocol.MaxProgressBytes*4)
				if err != nil || p.RunID != run {
					continue
				}
				if !yield(RunEvent{Kind: RunProgress, At: time.Now(), Progress: &p}, nil) {
					return
				}
			case n := <-entries:
				if n.err != nil {
					if ctx.Err() == nil {
						yield(RunEvent{}, fmt.Errorf("client: watching run %s: %w", run, n.err))
					} else {
						yield(RunEvent{}, fmt.Errorf("client: watching run %s: %w", run, context.Cause(ctx)))
					}
					return
				}
				e := n.rec.Entry
				switch e.Kind {
				case stores.EntryRequest:
					if following == nil {
						if following = c.followProgress(run, e.Data, progress); following != nil {
							defer following.Unsubscribe()
						}
					}
				case loop.EntryApprovalRequested, loop.EntryDispatched:
					for _, call := range e.Calls {
						tools[call.CallKey] = call.Tool
					}
				case loop.EntryObserved:
					calls := make([]CallAnswer, len(e.Observations))
					for i, o := range e.Observations {
						calls[i] = CallAnswer{CallKey: o.CallKey, Tool: tools[o.CallKey], Outcome: o.Outcome, Observation: o.Content,
							Worker: o.Worker, Duration: time.Duration(o.DurationMS) * time.Millisecond}
					}
					if !yield(RunEvent{Kind: RunAnswered, At: n.rec.Time, Round: e.Round, Calls: calls}, nil) {
						return
					}
				case loop.EntryFinished:
					yield(RunEvent{Kind: RunFinished, At: n.rec.Time, Round: e.Round, Termination: e.Termination, Answer: e.Answer}, nil)
					return
				}
			}
		}
	}
}

// followProgress subscribes progress to the progress subject of a served
// run, whose journaled request (data) names its client, and returns the
// subscription, or nil for a run that names none.
func (c *Client) followProgress(run protocol.RunID, data []byte, progress chan *nats.Msg) *nats.Subscription {
	var req struct {
		Client string `json:"client"`
	}
	if json.Unmarshal(data, &req) != nil || !protocol.ValidToken(req.Client) {
		return nil
	}
	subject, err := c.subjects.ClientRunProgress(req.Client, run)
	if err != nil {
		return nil
	}
	sub, err := c.nc.ChanSubscribe(subject, progress)
	if err != nil {
		return nil
	}
	return sub
}
