package loop

import (
	"context"
	"time"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// CallPhase is where one call stands. The vocabulary is fixed and
// append-only.
type CallPhase string

// The phases of a call, in the order they usually come; a call may skip
// any but the last.
const (
	// CallAwaitingApproval: the gate asked a human; the call waits.
	CallAwaitingApproval CallPhase = "awaiting_approval"
	// CallQueued: the call is being published to the fleet.
	CallQueued CallPhase = "queued"
	// CallStartedPhase: a worker said it started the call.
	CallStartedPhase CallPhase = "started"
	// CallDone: the call is answered; Outcome says how.
	CallDone CallPhase = "done"
)

// CallEvent is one step of one call, for a display of calls in flight.
type CallEvent struct {
	Run   protocol.RunID
	Round int
	// CallID is the id in the transcript: the model's text, clipped; print
	// it through internal/termsafe.
	CallID  string
	CallKey protocol.CallKey
	// Tool is the catalog tool's name, or "" when the model named none.
	Tool  string
	Phase CallPhase
	// Worker is the worker that started or answered the call, when known
	// (clipped, untrusted).
	Worker string
	// Outcome and Duration (the coordinator's handling time) are set when
	// Phase is CallDone.
	Outcome  protocol.Outcome
	Duration time.Duration
}

// CallObserver is an [Observer] that also follows each call through its
// phases. The loop calls CallEvent from the run's goroutine, like every
// Observer method: it must be quick and must not block.
type CallObserver interface {
	Observer
	CallEvent(ev CallEvent)
}

func (m multiObserver) CallEvent(ev CallEvent) {
	for _, o := range m {
		if co, ok := o.(CallObserver); ok {
			co.CallEvent(ev)
		}
	}
}

// A call's events, each with its sinks: callStarted (its span opens and
// its "tool call start" line), callQueued (the CallObserver, progress
// tracking), callStartedOnWorker (the CallObserver, a debug line), answer
// (the CallObserver; in answer.go, where each way a call ends is made),
// callRecorded (its "tool call end" line, its span's end and the Observer;
// the Result is written by record) and, for a call past the round's cap,
// callRejected (the Observer, the CallObserver, its span).

// callStarted: the call is validated (or answered by its validation).
func (ru *run) callStarted(ctx context.Context, round int, c *roundCall, raw string, obj map[string]any) {
	ru.startToolSpan(ctx, round, c, raw)
	ru.traceStart(round, c, raw, obj)
}

// callQueued: the call is about to be published.
func (ru *run) callQueued(round int, c *roundCall) {
	ru.callEvent(round, c, CallQueued)
	ru.trackProgress(c)
}

// trackProgress records a call about to be published, when the run's
// progress goes somewhere.
func (ru *run) trackProgress(s *roundCall) {
	if !ru.progress.on || s.entry == nil {
		return
	}
	ru.progress.calls.Store(s.key, progressCall{id: protocol.CallID(s.idText), tool: s.entry.spec.Name, span: s.span})
}

// callRecorded: the call's tool message and record are written; rec is
// its record.
func (ru *run) callRecorded(c *roundCall, rec *CallRecord, tools map[protocol.ToolName]*toolEntry) {
	if c.repeatOf == "" {
		ru.traceEnd(c, rec)
		ru.endToolSpan(c)
	}
	var tool string
	if c.entry != nil {
		tool = string(c.entry.spec.Name)
	} else {
		tool = catalogName(c.name, tools)
	}
	ru.cfg.Observer.CallEnded(tool, rec.Outcome, c.end.Sub(c.start))
	if c.approval {
		ru.cfg.Observer.Approval(approvalResult(c))
	}
}

// callStartedOnWorker: a worker said it started the call (a started
// notice, which may come more than once); the CallObserver hears of the
// first.
func (ru *run) callStartedOnWorker(round int, c *roundCall, p protocol.Started) {
	first := !c.started
	c.started = true
	c.ans.Worker, c.ans.Attempt = clipName(p.Worker), p.Attempt
	if first {
		ru.callEvent(round, c, CallStartedPhase)
	}
	ru.log.Debug().Str(logKeyEvent, evProgress).Int(logKeyRound, round).
		Str(logKeyCallKey, string(p.CallKey)).Str(logKeyWorker, c.ans.Worker).Send()
}

// callEvent tells the run's Observer, when it follows calls, that s is in
// phase.
func (ru *run) callEvent(round int, s *roundCall, phase CallPhase) {
	co, ok := ru.cfg.Observer.(CallObserver)
	if !ok {
		return
	}
	ev := CallEvent{Run: ru.id, Round: round, CallID: s.idText, CallKey: s.key, Phase: phase, Worker: s.ans.Worker}
	if s.entry != nil {
		ev.Tool = string(s.entry.spec.Name)
	}
	if phase == CallDone {
		ev.Outcome, ev.Duration = s.ans.Outcome, s.end.Sub(s.start)
	}
	co.CallEvent(ev)
}

// startToolSpan opens a call's span, "execute_tool <tool>", from its
// validation to its answer. Its context travels with the published call
// so that the worker's spans join the trace. Argument values are added only
// with Config.TraceArgs.
func (ru *run) startToolSpan(ctx context.Context, round int, s *roundCall, raw string) {
	name := s.tool
	if s.entry == nil {
		name = "_unknown"
	}
	spanName := unknownToolSpan
	if s.entry != nil {
		spanName = s.entry.toolSpanName()
	}
	attrs := []attribute.KeyValue{
		attribute.String(attrOperation, "execute_tool"), attribute.String(attrToolName, name),
		attribute.String(attrToolCallID, s.idText), attribute.String(attrCallKey, string(s.key)),
		attribute.Int(attrRound, round),
	}
	if ru.cfg.TraceArgs {
		args := raw
		if s.args != nil {
			args = string(s.args)
		}
		v, _ := protocol.Truncate(args, maxLoggedArgBytes)
		attrs = append(attrs, attribute.String(attrToolArguments, v))
	}
	_, s.span = ru.tr.Start(ctx, spanName, producerSpan, trace.WithTimestamp(s.start), trace.WithAttributes(attrs...))
}

// unknownToolSpan names the span of a call to a tool not in the round's
// catalog.
const unknownToolSpan = "execute_tool _unknown"

// producerSpan is the kind of a call's span.
var producerSpan = trace.WithSpanKind(trace.SpanKindProducer)

// toolSpanName is the name of the spans of calls to e's tool, "execute_tool
// <tool>", made once a round: a call's tool token is the spec's name
// (catalogTool), which clipName leaves as it is.
func (e *toolEntry) toolSpanName() string {
	if e.spanName == "" {
		e.spanName = "execute_tool " + string(e.spec.Name)
	}
	return e.spanName
}

// endToolSpan closes a call's span with its outcome (never its
// observation or error message).
func (ru *run) endToolSpan(s *roundCall) {
	if s.span == nil {
		return
	}
	if !s.span.IsRecording() { // attributes would be dropped
		s.span.End()
		return
	}
	a := &s.ans
	s.span.SetAttributes(attribute.String(attrOutcome, string(a.Outcome)))
	if a.Worker != "" {
		s.span.SetAttributes(attribute.String("toolfleet.worker", clipName(a.Worker)), attribute.Int("toolfleet.attempt", a.Attempt))
	}
	if a.Outcome != protocol.OutcomeOK {
		s.span.SetStatus(codes.Error, "")
		if a.ErrorType != "" {
			s.span.SetAttributes(attribute.String(attrErrorType, clipName(a.ErrorType)))
		} else {
			s.span.SetAttributes(attribute.String(attrErrorType, string(a.Outcome)))
		}
	}
	s.span.End(trace.WithTimestamp(s.end))
}

// callRejected: a call past the round's cap is answered rejected and
// recorded (record.go). It never gets a roundCall or a log line of its
// own: the Observer, the CallObserver and a span that starts and ends
// with its rejection hear of it.
func (ru *run) callRejected(ctx context.Context, round int, tc ToolCall, tools map[protocol.ToolName]*toolEntry) {
	ru.cfg.Observer.CallEnded(catalogName(tc.Function.Name, tools), protocol.OutcomeRejected, 0)
	ru.callEvent(round, &roundCall{id: tc.ID, idText: clipName(tc.ID), ans: JournaledObservation{Outcome: protocol.OutcomeRejected}}, CallDone)
	s := roundCall{id: tc.ID, name: tc.Function.Name, tool: clipName(tc.Function.Name), idText: clipName(tc.ID),
		entry: catalogTool(tc.Function.Name, tools),
		start: ru.cfg.Now(), end: ru.cfg.Now(), ans: JournaledObservation{Outcome: protocol.OutcomeRejected}}
	ru.startToolSpan(ctx, round, &s, tc.Function.Arguments)
	ru.endToolSpan(&s)
}

// traceStart logs a call's start: ids, tool, argument keys and digest, and
// argument values only under Config.TraceArgs.
func (ru *run) traceStart(round int, c *roundCall, raw string, obj map[string]any) {
	ev := ru.log.Info()
	if !ev.Enabled() {
		return
	}
	args, digest := c.args, ""
	if args != nil {
		digest = protocol.CanonicalArgsDigest(args) // validated arguments are canonical already
	} else {
		args = []byte(raw)
		digest = protocol.ArgsDigest(args)
	}
	ev.Str(logKeyEvent, evToolCallStart).Int(logKeyRound, round).Str(logKeyCallKey, string(c.key)).
		Str(logKeyCallID, c.idText).Str(logKeyTool, c.tool).
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

// traceEnd logs a call's record, never its observation.
func (ru *run) traceEnd(c *roundCall, rec *CallRecord) {
	var ev *zerolog.Event
	switch rec.Outcome {
	case protocol.OutcomeOK:
		ev = ru.log.Info()
	default:
		ev = ru.log.Warn()
	}
	if !ev.Enabled() {
		return
	}
	ev = ev.Str(logKeyEvent, evToolCallEnd).Int(logKeyRound, rec.Round).Str(logKeyCallKey, string(rec.CallKey)).
		Str(logKeyCallID, c.idText).Str(logKeyTool, rec.Tool).
		Str(logKeyOutcome, string(rec.Outcome)).Int64(logKeyDurationMS, rec.DurationMS)
	if rec.Worker != "" {
		ev = ev.Str(logKeyWorker, rec.Worker).Int(logKeyAttempt, rec.Attempt)
	}
	if rec.ErrorType != "" {
		ev = ev.Str(logKeyErrorType, rec.ErrorType)
	}
	if c.ans.GateResult != "" {
		ev = ev.Str(logKeyApproval, c.ans.GateResult)
	}
	ev.Send()
}
