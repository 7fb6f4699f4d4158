package loop

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// roundCall is one call of a round within the cap, from its validation to
// its answer. Only the round's own goroutine touches it.
type roundCall struct {
	id       string // the call id in the transcript (maybe replaced)
	repeatOf string // the model's id, when it repeats an earlier call of the same message
	name     string // the tool name as the model wrote it
	// tool and idText are name and id clipped (clipName), for records,
	// log lines, spans and events.
	tool, idText string
	round        int
	entry        *toolEntry
	args         []byte // canonical arguments, once valid
	key          protocol.CallKey
	approval     bool                    // needs the gate
	proof        *protocol.ApprovalProof // the gate's proof of an approval

	timeout  time.Duration
	deadline protocol.CallDeadline // when the call times out, and its grace
	started  bool                  // a worker said it started the call, or claimed it
	asked    bool                  // the inbox was asked to withdraw the call
	// cancelWhy, when set, is the reason of the Cancel the round publishes
	// for the call.
	cancelWhy string

	start, end time.Time
	done       bool                 // answered
	ans        JournaledObservation // how, as the journal keeps it
	span       trace.Span           // the call's span, from validation to its answer
}

// round runs docs/design.md §4 for one assistant message: it stores the
// message (with any replaced ids) and appends one tool message per call,
// in request order, whatever happens. Its phases are called in order from
// here, each in the file named for it: validate, approve, dispatch
// (publish and await the stores), gather, record; run control answers
// calls before the gate (a replay) and before dispatch (a dry run),
// control.go. A durable run whose
// round is journaled as observed replays its answers instead of the
// middle three (replay.go).
//
// dropped counts the calls of the model's response past
// MaxToolCallsKept, which msg no longer holds: the last rejected call's
// observation says so, once.
func (ru *run) round(ctx context.Context, round int, msg Message, tools map[protocol.ToolName]*toolEntry, dropped int) {
	calls, limit := ru.validate(ctx, round, msg, tools, dropped)
	if !ru.j.replayObserved(round, calls) {
		ru.ctl.beforeApprove(ru, round, calls)
		ru.approve(ctx, round, calls)
		if ru.j.checkpoint() != nil {
			return
		}
		ru.ctl.beforeDispatch(ru, round, calls)
		if interrupted, ok := ru.pollInterrupt(ctx, round); !ok {
			return
		} else if interrupted {
			ru.interruptUnpublished(calls)
		}
		pending, ok := ru.dispatch(ctx, round, calls)
		if !ok {
			return
		}
		ru.gather(ctx, round, pending)
		if answeredWithoutCancels(calls) {
			ru.j.gathered()
		}
		if !ru.j.flush(ctx) || ru.j.checkpoint() != nil {
			return
		}
		ru.publishCancels(ctx, calls)
		if !ru.j.observed(ctx, round, calls) {
			return
		}
	}
	ru.record(ctx, round, msg.ToolCalls, calls, limit, dropped, tools)
}

// answeredWithoutCancels reports whether every call of the round is
// answered and none is to be cancelled.
func answeredWithoutCancels(calls []roundCall) bool {
	for i := range calls {
		if !calls[i].done || calls[i].cancelWhy != "" {
			return false
		}
	}
	return true
}
