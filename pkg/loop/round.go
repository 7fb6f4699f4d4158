package loop

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"go.opentelemetry.io/otel/trace"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/pkg/protocol"
	"github.com/toolfleet/toolfleet/pkg/schema"
)

// MaxArgumentsBytes bounds a call's arguments. Larger arguments are
// answered invalid_arguments and never published.
const MaxArgumentsBytes = 512 << 10

// callState is the state of one call within the cap, from validation to
// its answer. Only the round's own goroutine touches it. (A worker's
// "slots" are its free capacity; the loop has none.)
type callState struct {
	id       string // the call id in the transcript (maybe replaced)
	origID   string // the id the model wrote, for a repeat's rejection
	name     string // the tool name as the model wrote it
	repeat   bool   // repeats an earlier id of the same message
	entry    *toolEntry
	args     []byte // canonical arguments, once valid
	key      protocol.CallKey
	round    int // for a CallObserver's events
	start    time.Time
	approval bool                    // needs the gate
	proof    *protocol.ApprovalProof // the gate's proof of an approval

	timeout  time.Duration
	deadline protocol.CallDeadline // when the call times out, and its grace
	started  bool                  // a worker said it started the call, or claimed it
	asked    bool                  // the inbox was asked to withdraw the call

	done       bool
	outcome    protocol.Outcome
	obs        string
	end        time.Time
	worker     string
	attempt    int
	truncated  bool   // the worker cut the output
	errorType  string // for failed calls
	cancelWhy  string // non-empty: publish a Cancel for the call
	gateResult string // how the gate answered, for the trace

	span trace.Span // the call's span, from validation to its answer
}

// round runs docs/design.md §4 for one assistant message: it stores the message
// (with any replaced ids) and appends one tool message per call, in request
// order, whatever happens.
//
// dropped counts the calls of the model's response past
// MaxToolCallsKept, which msg no longer holds: the last rejected call's
// observation says so, once.
func (ru *run) round(ctx context.Context, round int, msg Message, tools map[protocol.ToolName]*toolEntry, dropped int) {
	calls := msg.ToolCalls
	n := len(calls)
	limit := ru.callLimit(n)
	within := min(n, limit)

	// Ids first: the stored assistant message must carry unique, bounded,
	// non-empty ids before anything answers them.
	slots := make([]callState, within)
	seen := make(map[string]struct{}, within)
	for i := range calls {
		orig := calls[i].ID
		var why string
		_, inRound := seen[orig]
		_, inRun := ru.ids[orig]
		switch {
		case orig == "":
			why = "empty"
		case len(orig) > protocol.MaxCallIDLen:
			why = "too_long"
		case i < within && inRound:
			why = "repeat"
		case inRun:
			why = "reused"
		}
		if i < within && orig != "" {
			seen[orig] = struct{}{}
		}
		if why != "" {
			calls[i].ID = ru.freshCallID(round, i)
		}
		ru.ids[calls[i].ID] = struct{}{}
		if calls[i].Type == "" {
			calls[i].Type = "function"
		}
		if i < within {
			slots[i] = callState{id: calls[i].ID, origID: orig, name: calls[i].Function.Name, repeat: why == "repeat"}
			if why != "" {
				ru.log.Info().Str(logKeyEvent, evCallIDReplaced).Int(logKeyRound, round).
					Str(logKeyCallID, calls[i].ID).Str(logKeyIDProblem, why).Send()
			}
		}
	}
	ru.msgs = append(ru.msgs, msg)

	// Step 1 is the tail below; steps 2 and 3: repeats, tools, arguments.
	start := ru.now()
	for i := range slots {
		s := &slots[i]
		s.start, s.round = start, round
		if s.repeat {
			ru.answer(s, protocol.OutcomeRejected, obsRepeatRejected(s.origID))
			continue
		}
		ru.res.Metadata.ToolCallsMade++
		s.key = ru.newKey(round, i)
		obj := ru.validate(s, calls[i].Function.Arguments, tools)
		ru.startToolSpan(ctx, round, s, calls[i].Function.Arguments)
		ru.traceStart(round, s, calls[i].Function.Arguments, obj)
		if !s.done {
			s.approval = ru.r.approveAll || ru.r.approve[s.entry.spec.Name] || s.entry.spec.RequiresApproval
		}
	}
	if n > within {
		ru.log.Warn().Str(logKeyEvent, evCallsRejected).Int(logKeyRound, round).
			Int(logKeyRequested, n+dropped).Int(logKeyLimit, limit).Int(logKeyCount, n-within).
			Int(logKeyDropped, dropped).Send()
	}
	ru.res.Metadata.DroppedToolCalls += dropped

	// Step 4: approvals, concurrently. Step 5 and 6: dispatch and gather.
	// A durable run whose round was observed replays its answers instead.
	if !ru.replayObserved(round, slots) {
		ru.approve(ctx, round, slots)
		if ru.stopped() {
			return
		}
		ru.dispatch(ctx, round, slots)
		if ru.stopped() {
			return
		}
		ru.publishCancels(ctx, slots)
		for i := range slots {
			if !slots[i].done { // unreachable; never leave an id open
				ru.answer(&slots[i], protocol.OutcomeCancelled, obsCancelled(slots[i].name))
			}
		}
		if !ru.appendEntry(ctx, JournalEntry{Kind: EntryObserved, Round: round, Observations: observations(slots)}) {
			return
		}
	}

	// Step 7: one tool message per call, in request order.
	for i := range slots {
		s := &slots[i]
		if !s.done { // unreachable; never leave an id open
			ru.answer(s, protocol.OutcomeCancelled, obsCancelled(s.name))
		}
		ru.record(round, s)
		if !s.repeat {
			ru.traceEnd(round, s)
			ru.endToolSpan(s)
		}
		ru.observe(s, tools)
	}
	if n > within {
		text, cut := bound(ru.capRejected(n+dropped, limit), ru.cfg.MaxObservationChars)
		for i := within; i < n; i++ {
			if i == n-1 && dropped > 0 {
				text, cut = bound(ru.capRejected(n+dropped, limit)+obsDropped(dropped), ru.cfg.MaxObservationChars)
			}
			if cut {
				ru.res.Metadata.TruncatedObservations++
			}
			ru.msgs = append(ru.msgs, Message{Role: "tool", ToolCallID: calls[i].ID, Content: text, Outcome: protocol.OutcomeRejected})
			ru.res.Metadata.RejectedToolCalls++
			ru.res.Metadata.Outcomes[protocol.OutcomeRejected]++
			ru.res.Calls = append(ru.res.Calls, CallRecord{Round: round, CallID: calls[i].ID,
				Tool: clipName(calls[i].Function.Name), Outcome: protocol.OutcomeRejected})
			ru.cfg.Observer.CallEnded(catalogName(calls[i].Function.Name, tools), protocol.OutcomeRejected, 0)
			ru.callEvent(round, &callState{id: calls[i].ID, outcome: protocol.OutcomeRejected}, CallDone)
			ru.rejectedSpan(ctx, round, calls[i], tools)
		}
	}
}

// validate resolves the tool and checks the arguments; on failure it
// answers the call. It returns the parsed arguments (for trace keys) when
// they are a JSON object.
func (ru *run) validate(s *callState, raw string, tools map[protocol.ToolName]*toolEntry) map[string]any {
	s.entry = catalogTool(s.name, tools)
	if s.entry == nil {
		ru.answer(s, protocol.OutcomeUnknownTool, obsUnknownTool(s.name))
		return nil
	}
	if strings.TrimSpace(raw) == "" {
		raw = "{}"
	}
	if len(raw) > MaxArgumentsBytes {
		ru.answer(s, protocol.OutcomeInvalidArguments, obsArgumentError(s.name,
			fmt.Sprintf("arguments are too large: %d bytes, limit %d", len(raw), MaxArgumentsBytes)))
		return nil
	}
	// Parsed once: validated and canonicalised from the same object.
	obj, err := schema.ParseObject([]byte(raw))
	if err == nil {
		err = s.entry.schema.ValidateObject(obj)
	}
	if err == nil {
		s.args, err = protocol.CanonicalValue(obj)
		if err != nil {
			err = &schema.ArgumentError{Msg: "arguments are not valid JSON"}
		}
	}
	if err != nil {
		msg := "arguments do not match the schema"
		var ae *schema.ArgumentError
		if errors.As(err, &ae) {
			msg = ae.Msg
		}
		s.args = nil
		ru.answer(s, protocol.OutcomeInvalidArguments, obsArgumentError(s.name, msg))
	}
	return obj
}

// answer closes a call with its outcome and observation.
func (ru *run) answer(s *callState, o protocol.Outcome, obs string) {
	first := !s.done
	s.done, s.outcome, s.obs, s.end = true, o, obs, ru.now()
	if first {
		ru.callEvent(s.round, s, CallDone)
	}
}

// record appends a call's tool message and its record.
func (ru *run) record(round int, s *callState) {
	obs, cut := bound(s.obs, ru.cfg.MaxObservationChars)
	m := &ru.res.Metadata
	if cut || s.truncated {
		m.TruncatedObservations++
	}
	ru.msgs = append(ru.msgs, Message{Role: "tool", ToolCallID: s.id, Content: obs, Outcome: s.outcome})
	m.Outcomes[s.outcome]++
	if s.outcome == protocol.OutcomeRejected {
		m.RejectedToolCalls++
	}
	ru.res.Calls = append(ru.res.Calls, CallRecord{
		Round: round, CallID: s.id, CallKey: s.key, Tool: clipName(s.name), Outcome: s.outcome,
		DurationMS: ms(s.end.Sub(s.start)), Worker: s.worker, Attempt: s.attempt, ErrorType: s.errorType,
	})
}

// observe reports an answered call to the Observer: its catalog tool name
// (never the model's text for an unknown tool), outcome, handling time and
// how the gate settled it.
func (ru *run) observe(s *callState, tools map[protocol.ToolName]*toolEntry) {
	tool := catalogName(s.name, tools)
	if s.entry != nil {
		tool = string(s.entry.spec.Name)
	}
	ru.cfg.Observer.CallEnded(tool, s.outcome, s.end.Sub(s.start))
	if s.approval {
		ru.cfg.Observer.Approval(approvalResult(s))
	}
}

// catalogTool returns the entry of the round's catalog that the model's
// tool name names, or nil. It is where the model's text becomes a
// [protocol.ToolName], through [protocol.ParseToolName]; a call carries its
// entry's spec name from then on.
func catalogTool(name string, tools map[protocol.ToolName]*toolEntry) *toolEntry {
	tool, err := protocol.ParseToolName(name)
	if err != nil {
		return nil
	}
	return tools[tool]
}

// catalogName returns name when it names a tool of the round's catalog,
// else "".
func catalogName(name string, tools map[protocol.ToolName]*toolEntry) string {
	if e := catalogTool(name, tools); e != nil {
		return string(e.spec.Name)
	}
	return ""
}

// traceStart logs a call's start: ids, tool, argument keys and digest, and
// argument values only under Config.TraceArgs.
func (ru *run) traceStart(round int, s *callState, raw string, obj map[string]any) {
	ev := ru.log.Info()
	if !ev.Enabled() {
		return
	}
	args, digest := s.args, ""
	if args != nil {
		digest = protocol.CanonicalArgsDigest(args) // validated arguments are canonical already
	} else {
		args = []byte(raw)
		digest = protocol.ArgsDigest(args)
	}
	ev.Str(logKeyEvent, evToolCallStart).Int(logKeyRound, round).Str(logKeyCallKey, string(s.key)).
		Str(logKeyCallID, clipName(s.id)).Str(logKeyTool, clipName(s.name)).
		Str(logKeyArgsDigest, digest).Int(logKeyArgsBytes, len(raw))
	if obj != nil {
		ev.Strs(logKeyArgKeys, argKeys(obj))
	}
	if ru.cfg.TraceArgs {
		v, _ := protocol.Truncate(string(args), maxLoggedArgBytes)
		ev.Str(logKeyArgs, v)
	}
	ev.Send()
}

// traceEnd logs a call's outcome, never its observation.
func (ru *run) traceEnd(round int, s *callState) {
	var ev *zerolog.Event
	switch s.outcome {
	case protocol.OutcomeOK:
		ev = ru.log.Info()
	default:
		ev = ru.log.Warn()
	}
	ev = ev.Str(logKeyEvent, evToolCallEnd).Int(logKeyRound, round).Str(logKeyCallKey, string(s.key)).
		Str(logKeyCallID, clipName(s.id)).Str(logKeyTool, clipName(s.name)).
		Str(logKeyOutcome, string(s.outcome)).Int64(logKeyDurationMS, ms(s.end.Sub(s.start)))
	if s.worker != "" {
		ev = ev.Str(logKeyWorker, s.worker).Int(logKeyAttempt, s.attempt)
	}
	if s.errorType != "" {
		ev = ev.Str(logKeyErrorType, s.errorType)
	}
	if s.gateResult != "" {
		ev = ev.Str(logKeyApproval, s.gateResult)
	}
	ev.Send()
}

// approval is one gate answer.
type approval struct {
	i       int
	d       Decision
	err     error
	expired bool // the gate answered after deadline+grace
}

// approve asks the gate about every valid call that needs approval, all at
// once, and answers the calls it does not approve. It never waits past
// the approval deadline plus twice the grace, even for a gate that ignores
// its context.
func (ru *run) approve(ctx context.Context, round int, slots []callState) {
	var waiting []int
	for i := range slots {
		if !slots[i].done && slots[i].approval {
			waiting = append(waiting, i)
		}
	}
	if len(waiting) == 0 {
		return
	}
	gate := ru.r.gate
	if gate == nil || ctx.Err() != nil {
		for _, i := range waiting {
			s := &slots[i]
			if gate == nil {
				s.gateResult = "no_gate"
				ru.answer(s, protocol.OutcomeDenied, obsApprovalUnavailable(s.name))
			} else {
				ru.answer(s, protocol.OutcomeCancelled, obsCancelled(s.name))
			}
		}
		return
	}
	timeout := ru.cfg.ApprovalTimeout
	deadline := ru.now().Add(timeout)
	if ru.j != nil {
		if e, ok := ru.j.rp.approvals[round]; ok {
			deadline = e.Deadline // a resumed wait keeps its deadline
			waiting = ru.replayDecisions(slots, waiting)
		} else {
			calls := make([]JournaledCall, 0, len(waiting))
			for _, i := range waiting {
				calls = append(calls, JournaledCall{CallKey: slots[i].key, Tool: slots[i].name})
			}
			if !ru.appendEntry(ctx, JournalEntry{Kind: EntryApprovalRequested, Round: round, Deadline: deadline, Calls: calls}) {
				return
			}
		}
	}
	// A hand-off ends the gate's wait with cause ErrHandedOff: the request
	// is still pending, for the next owner.
	gctx, gcancel := context.WithCancelCause(ctx)
	defer gcancel(nil)
	ch := make(chan approval, len(waiting))
	open := make(map[int]bool, len(waiting))
	for _, i := range waiting {
		s := &slots[i]
		digest, err := protocol.Digest(ru.id, s.key, s.entry.spec.Name, s.args)
		if err != nil {
			s.gateResult = "digest_error"
			ru.answer(s, protocol.OutcomeDenied, obsApprovalUnavailable(s.name))
			continue
		}
		req := protocol.ApprovalRequest{
			V: protocol.Version, RunID: ru.id, CallKey: s.key, CallID: protocol.CallID(s.id), Round: round,
			Tool: s.entry.spec.Name, Arguments: bytes.Clone(s.args), Digest: digest, Deadline: deadline,
		}
		open[i] = true
		ru.callEvent(round, s, CallAwaitingApproval)
		go func() {
			actx, cancel := context.WithDeadline(gctx, deadline.Add(ru.cfg.Grace))
			defer cancel()
			d, err := gate.Approve(actx, req)
			ch <- approval{i: i, d: d, err: err, expired: errors.Is(actx.Err(), context.DeadlineExceeded)}
		}()
	}
	backstop := time.NewTimer(deadline.Sub(ru.now()) + 2*ru.cfg.Grace)
	defer backstop.Stop()
	for len(open) > 0 {
		select {
		case a := <-ch:
			delete(open, a.i)
			ru.applyDecision(ctx, &slots[a.i], a, timeout)
			if !ru.journalDecision(ctx, &slots[a.i]) {
				return
			}
		case <-backstop.C:
			for i := range open {
				s := &slots[i]
				s.gateResult = "no_answer"
				ru.answer(s, protocol.OutcomeApprovalExpired, obsApprovalExpired(s.name, timeout))
				if !ru.journalDecision(ctx, s) {
					return
				}
			}
			return
		case <-ru.handoffC():
			ru.stopped()
			gcancel(ErrHandedOff)
			return
		case <-ctx.Done():
			for i := range open {
				ru.answer(&slots[i], protocol.OutcomeCancelled, obsCancelled(slots[i].name))
			}
			return
		}
	}
}

// applyDecision maps a gate answer onto the call. Anything but a timely,
// explicit approval keeps the call from running; only an explicit "no" is
// reported as a denial with a reason, never a timeout or a gate failure.
func (ru *run) applyDecision(ctx context.Context, s *callState, a approval, timeout time.Duration) {
	switch {
	case ctx.Err() != nil:
		ru.answer(s, protocol.OutcomeCancelled, obsCancelled(s.name))
	case a.expired || (a.err == nil && a.d.Expired):
		s.gateResult = "expired"
		ru.answer(s, protocol.OutcomeApprovalExpired, obsApprovalExpired(s.name, timeout))
	case a.err != nil:
		s.gateResult = "gate_error:" + errType(a.err)
		ru.answer(s, protocol.OutcomeDenied, obsApprovalUnavailable(s.name))
	case a.d.Approved:
		s.gateResult = "approved"
		s.proof = a.d.Proof
	default:
		s.gateResult = "denied"
		reason, _ := protocol.Truncate(a.d.Reason, protocol.MaxReasonLen)
		ru.answer(s, protocol.OutcomeDenied, obsDenied(s.name, reason))
	}
}

// replayObserved answers every call of a round whose observations are
// journaled, as they were; false when the round was not observed.
func (ru *run) replayObserved(round int, slots []callState) bool {
	if ru.j == nil {
		return false
	}
	obs, ok := ru.j.rp.observed[round]
	if !ok || len(obs) != len(slots) {
		return false
	}
	for i := range slots {
		s, o := &slots[i], obs[i]
		s.done, s.outcome, s.obs = true, o.Outcome, o.Content
		s.end = s.start.Add(time.Duration(o.DurationMS) * time.Millisecond)
		s.worker, s.attempt, s.truncated, s.errorType, s.gateResult = o.Worker, o.Attempt, o.Truncated, o.ErrorType, o.GateResult
		if s.key != "" {
			ru.keys[s.key] = keyByResult
		}
	}
	return true
}

// replayDecisions applies the journaled decisions of a resumed approval
// wait and returns the calls still waiting.
func (ru *run) replayDecisions(slots []callState, waiting []int) []int {
	var still []int
	for _, i := range waiting {
		s := &slots[i]
		d, ok := ru.j.rp.decisions[s.key]
		if !ok {
			still = append(still, i)
			continue
		}
		s.gateResult, s.proof = d.GateResult, d.Proof
		if d.Outcome != "" {
			ru.answer(s, d.Outcome, d.Content)
		}
	}
	return still
}

// journalDecision journals how the gate settled s, before it takes effect.
func (ru *run) journalDecision(ctx context.Context, s *callState) bool {
	d := JournaledDecision{CallKey: s.key, GateResult: s.gateResult, Proof: s.proof}
	if s.done {
		d.Outcome, d.Content = s.outcome, s.obs
	}
	return ru.appendEntry(ctx, JournalEntry{Kind: EntryApprovalDecided, Decision: &d})
}
