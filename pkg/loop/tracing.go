package loop

import (
	"context"
	"reflect"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// TracerName is the instrumentation scope of the loop's spans.
const TracerName = "github.com/toolfleet/toolfleet/pkg/loop"

// Span attribute keys. The gen_ai.* keys follow the OpenTelemetry GenAI
// semantic conventions; toolfleet.* are this project's.
const (
	AttrOperation      = "gen_ai.operation.name"
	AttrProvider       = "gen_ai.provider.name"
	AttrRequestModel   = "gen_ai.request.model"
	AttrToolName       = "gen_ai.tool.name"
	AttrToolCallID     = "gen_ai.tool.call.id"
	AttrToolArguments  = "gen_ai.tool.call.arguments"
	AttrInputTokens    = "gen_ai.usage.input_tokens"
	AttrOutputTokens   = "gen_ai.usage.output_tokens"
	AttrFinishReasons  = "gen_ai.response.finish_reasons"
	AttrConversationID = "gen_ai.conversation.id"
	AttrRunID          = "toolfleet.run_id"
	AttrRound          = "toolfleet.round"
	AttrCallKey        = "toolfleet.call_key"
	AttrOutcome        = "toolfleet.outcome"
	AttrToolCalls      = "toolfleet.tool_calls"
	AttrTermination    = "toolfleet.termination_reason"
	AttrErrorType      = "error.type"
)

// Describer is implemented by models that can name their provider and model
// for spans (gen_ai.provider.name, gen_ai.request.model).
type Describer interface {
	Describe() (provider, model string)
}

func (ru *run) tracer() trace.Tracer {
	tp := ru.cfg.TracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return cachedTracer(tp)
}

// tracerCache is the loop's tracer of one tracer provider.
type tracerCache struct {
	tp trace.TracerProvider
	tr trace.Tracer
}

// lastTracer holds the tracer of the provider last seen.
var lastTracer atomic.Pointer[tracerCache]

// cachedTracer is tp's tracer of this package, looked up again only when
// the provider changes: a provider returns the same tracer for the same
// name, and the global one takes a lock to look it up.
func cachedTracer(tp trace.TracerProvider) trace.Tracer {
	if c := lastTracer.Load(); c != nil && c.tp == tp {
		return c.tr
	}
	tr := tp.Tracer(TracerName)
	if reflect.TypeOf(tp).Comparable() { // == on it must not panic
		lastTracer.Store(&tracerCache{tp: tp, tr: tr})
	}
	return tr
}

// startRunSpan opens the run's span: "invoke_agent toolfleet".
func (ru *run) startRunSpan(ctx context.Context) (context.Context, func(*Result, error)) {
	ctx, span := ru.tracer().Start(ctx, "invoke_agent toolfleet", trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(attribute.String(AttrOperation, "invoke_agent"), attribute.String(AttrRunID, string(ru.id)),
			attribute.String(AttrConversationID, string(ru.id))))
	return ctx, func(res *Result, err error) {
		if res != nil {
			span.SetAttributes(attribute.String(AttrTermination, string(res.TerminationReason)),
				attribute.Int(AttrInputTokens, res.Metadata.PromptTokens), attribute.Int(AttrOutputTokens, res.Metadata.CompletionTokens))
		}
		if err != nil {
			span.SetStatus(codes.Error, "")
			span.SetAttributes(attribute.String(AttrErrorType, errType(err)))
		}
		span.End()
	}
}

// startRoundSpan opens a round's span, the parent of its model call and
// tool calls.
func (ru *run) startRoundSpan(ctx context.Context, round int) (context.Context, func()) {
	ctx, span := ru.tracer().Start(ctx, "round", trace.WithAttributes(attribute.Int(AttrRound, round)))
	return ctx, func() { span.End() }
}

// startModelSpan opens a model call's span: "chat [model]".
func (ru *run) startModelSpan(ctx context.Context, round int) (context.Context, func(*Response, error)) {
	name := "chat"
	attrs := []attribute.KeyValue{attribute.String(AttrOperation, "chat"), attribute.Int(AttrRound, round)}
	if d, ok := ru.r.model.(Describer); ok {
		provider, model := d.Describe()
		if model != "" {
			name += " " + clipName(model)
			attrs = append(attrs, attribute.String(AttrRequestModel, clipName(model)))
		}
		if provider != "" {
			attrs = append(attrs, attribute.String(AttrProvider, clipName(provider)))
		}
	}
	ctx, span := ru.tracer().Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	return ctx, func(resp *Response, err error) {
		if err != nil {
			span.SetStatus(codes.Error, "")
			span.SetAttributes(attribute.String(AttrErrorType, errType(err)))
		} else if resp != nil {
			span.SetAttributes(attribute.Int(AttrInputTokens, resp.Usage.PromptTokens),
				attribute.Int(AttrOutputTokens, resp.Usage.CompletionTokens),
				attribute.StringSlice(AttrFinishReasons, []string{clipName(resp.FinishReason)}),
				attribute.Int(AttrToolCalls, len(resp.Message.ToolCalls)))
		}
		span.End()
	}
}

// startToolSpan opens a call's span, "execute_tool <tool>", from its
// validation to its answer. Its context travels with the published call
// so that the worker's spans join the trace. Argument values are added only
// with Config.TraceArgs.
func (ru *run) startToolSpan(ctx context.Context, round int, s *callState, raw string) {
	name := clipName(s.name)
	if s.entry == nil {
		name = "_unknown"
	}
	attrs := []attribute.KeyValue{
		attribute.String(AttrOperation, "execute_tool"), attribute.String(AttrToolName, name),
		attribute.String(AttrToolCallID, clipName(s.id)), attribute.String(AttrCallKey, string(s.key)),
		attribute.Int(AttrRound, round),
	}
	if ru.cfg.TraceArgs {
		args := raw
		if s.args != nil {
			args = string(s.args)
		}
		v, _ := protocol.Truncate(args, maxLoggedArgBytes)
		attrs = append(attrs, attribute.String(AttrToolArguments, v))
	}
	_, s.span = ru.tracer().Start(ctx, "execute_tool "+name, trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithTimestamp(s.start), trace.WithAttributes(attrs...))
}

// spanContext is ctx carrying s's span, for the call's publish.
func (ru *run) spanContext(ctx context.Context, s *callState) context.Context {
	if s.span == nil {
		return ctx
	}
	return trace.ContextWithSpan(ctx, s.span)
}

// endToolSpan closes a call's span with its outcome (never its
// observation or error message).
func (ru *run) endToolSpan(s *callState) {
	if s.span == nil {
		return
	}
	if !s.span.IsRecording() { // attributes would be dropped
		s.span.End()
		return
	}
	s.span.SetAttributes(attribute.String(AttrOutcome, string(s.outcome)))
	if s.worker != "" {
		s.span.SetAttributes(attribute.String("toolfleet.worker", clipName(s.worker)), attribute.Int("toolfleet.attempt", s.attempt))
	}
	if s.outcome != protocol.OutcomeOK {
		s.span.SetStatus(codes.Error, "")
		if s.errorType != "" {
			s.span.SetAttributes(attribute.String(AttrErrorType, clipName(s.errorType)))
		} else {
			s.span.SetAttributes(attribute.String(AttrErrorType, string(s.outcome)))
		}
	}
	s.span.End(trace.WithTimestamp(s.end))
}

// rejectedSpan records a call past the per-round cap, which never gets a
// callState: a span that starts and ends with its rejection.
func (ru *run) rejectedSpan(ctx context.Context, round int, tc ToolCall, tools map[protocol.ToolName]*toolEntry) {
	s := callState{id: tc.ID, name: tc.Function.Name, entry: catalogTool(tc.Function.Name, tools),
		start: ru.now(), end: ru.now(), outcome: protocol.OutcomeRejected}
	ru.startToolSpan(ctx, round, &s, tc.Function.Arguments)
	ru.endToolSpan(&s)
}
