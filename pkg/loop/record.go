package loop

import (
	"context"
	"time"

	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// record is a round's last phase (docs/design.md §4, step 7): one tool
// message per call, in request order — the calls within the cap, then
// the calls past it (asked holds every call of the stored message).
func (ru *run) record(ctx context.Context, round int, asked []ToolCall, calls []roundCall, limit, dropped int, tools map[protocol.ToolName]*toolEntry) {
	ru.answerOpen(calls)
	for i := range calls {
		ru.recordCall(round, &calls[i], tools)
	}
	n := len(asked)
	if n == len(calls) {
		return
	}
	text, cut := protocol.Truncate(ru.capRejected(n+dropped, limit), ru.cfg.MaxObservationChars)
	for i := len(calls); i < n; i++ {
		tc := asked[i]
		if i == n-1 && dropped > 0 {
			text, cut = protocol.Truncate(ru.capRejected(n+dropped, limit)+obsDropped(dropped), ru.cfg.MaxObservationChars)
		}
		if cut {
			ru.res.Metadata.TruncatedObservations++
		}
		ru.msgs = append(ru.msgs, Message{Role: "tool", ToolCallID: tc.ID, Content: text, Outcome: protocol.OutcomeRejected})
		ru.res.Metadata.RejectedToolCalls++
		ru.res.Metadata.Outcomes[protocol.OutcomeRejected]++
		ru.res.Calls = append(ru.res.Calls, CallRecord{Round: round, CallID: tc.ID,
			Tool: clipName(tc.Function.Name), Outcome: protocol.OutcomeRejected})
		ru.callRejected(ctx, round, tc, tools)
	}
}

// recordCall records one answered call: its tool message, and one event,
// its [CallRecord], of which the Result (its Calls and Metadata) and, in
// callRecorded, the "tool call end" line, the call's span and the
// Observer are sinks. The call's CallObserver heard of it when it was
// answered.
func (ru *run) recordCall(round int, c *roundCall, tools map[protocol.ToolName]*toolEntry) {
	obs, cut := protocol.Truncate(c.ans.Content, ru.cfg.MaxObservationChars)
	rec := CallRecord{
		Round: round, CallID: c.id, CallKey: c.key, Tool: c.tool, Outcome: c.ans.Outcome,
		DurationMS: ms(c.end.Sub(c.start)), Worker: c.ans.Worker, Attempt: c.ans.Attempt, ErrorType: c.ans.ErrorType,
	}
	m := &ru.res.Metadata
	if cut || c.ans.Truncated {
		m.TruncatedObservations++
	}
	ru.msgs = append(ru.msgs, Message{Role: "tool", ToolCallID: c.id, Content: obs, Outcome: rec.Outcome})
	m.Outcomes[rec.Outcome]++
	if rec.Outcome == protocol.OutcomeRejected {
		m.RejectedToolCalls++
	}
	ru.res.Calls = append(ru.res.Calls, rec)
	if c.sideEffect() {
		ru.res.SideEffects = append(ru.res.SideEffects, SideEffect{Round: round, CallID: c.id, CallKey: c.key, Tool: c.tool, Outcome: rec.Outcome})
	}
	ru.callRecorded(c, &rec, tools)
}

// sideEffect reports whether c, answered, is a call of a tool not declared
// idempotent that ran or may have run ([Result].SideEffects).
func (c *roundCall) sideEffect() bool {
	if c.entry == nil || c.entry.spec.Idempotent {
		return false
	}
	switch c.ans.Outcome {
	case protocol.OutcomeOK, protocol.OutcomeFailed, protocol.OutcomeUnknown:
		return true
	case protocol.OutcomeCancelled:
		return c.started
	}
	return false
}

// ms is the unit of every duration_ms of the loop — a CallRecord's, a
// journaled observation's, a log line's: whole milliseconds, as an int64.
func ms(d time.Duration) int64 { return d.Milliseconds() }
