package loop

import (
	"context"
	"reflect"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// TracerName is the instrumentation scope of the loop's spans.
const TracerName = "github.com/toolfleet/toolfleet/pkg/loop"

// Span attribute keys. The gen_ai.* keys follow the OpenTelemetry GenAI
// semantic conventions; toolfleet.* are this project's.
const (
	attrOperation      = "gen_ai.operation.name"
	attrProvider       = "gen_ai.provider.name"
	attrRequestModel   = "gen_ai.request.model"
	attrToolName       = "gen_ai.tool.name"
	attrToolCallID     = "gen_ai.tool.call.id"
	attrToolArguments  = "gen_ai.tool.call.arguments"
	attrInputTokens    = "gen_ai.usage.input_tokens"
	attrOutputTokens   = "gen_ai.usage.output_tokens"
	attrFinishReasons  = "gen_ai.response.finish_reasons"
	attrConversationID = "gen_ai.conversation.id"
	attrRunID          = "toolfleet.run_id"
	attrRound          = "toolfleet.round"
	attrCallKey        = "toolfleet.call_key"
	attrOutcome        = "toolfleet.outcome"
	attrToolCalls      = "toolfleet.tool_calls"
	attrTermination    = "toolfleet.termination_reason"
	attrErrorType      = "error.type"
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
	ru.tr = ru.tracer()
	ctx, span := ru.tr.Start(ctx, "invoke_agent toolfleet", trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(attribute.String(attrOperation, "invoke_agent"), attribute.String(attrRunID, string(ru.id)),
			attribute.String(attrConversationID, string(ru.id))))
	return ctx, func(res *Result, err error) {
		if res != nil {
			span.SetAttributes(attribute.String(attrTermination, string(res.TerminationReason)),
				attribute.Int(attrInputTokens, res.Metadata.PromptTokens), attribute.Int(attrOutputTokens, res.Metadata.CompletionTokens))
		}
		if err != nil {
			span.SetStatus(codes.Error, "")
			span.SetAttributes(attribute.String(attrErrorType, errType(err)))
		}
		span.End()
	}
}

// startRoundSpan opens a round's span, the parent of its model call and
// tool calls.
func (ru *run) startRoundSpan(ctx context.Context, round int) (context.Context, func()) {
	ctx, span := ru.tr.Start(ctx, "round", trace.WithAttributes(attribute.Int(attrRound, round)))
	return ctx, func() { span.End() }
}

// startModelSpan opens a model call's span: "chat [model]".
func (ru *run) startModelSpan(ctx context.Context, round int) (context.Context, func(*Response, error)) {
	name := "chat"
	attrs := []attribute.KeyValue{attribute.String(attrOperation, "chat"), attribute.Int(attrRound, round)}
	if d, ok := ru.r.model.(Describer); ok {
		provider, model := d.Describe()
		if model != "" {
			name += " " + clipName(model)
			attrs = append(attrs, attribute.String(attrRequestModel, clipName(model)))
		}
		if provider != "" {
			attrs = append(attrs, attribute.String(attrProvider, clipName(provider)))
		}
	}
	ctx, span := ru.tr.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	return ctx, func(resp *Response, err error) {
		if err != nil {
			span.SetStatus(codes.Error, "")
			span.SetAttributes(attribute.String(attrErrorType, errType(err)))
		} else if resp != nil {
			span.SetAttributes(attribute.Int(attrInputTokens, resp.Usage.PromptTokens),
				attribute.Int(attrOutputTokens, resp.Usage.CompletionTokens),
				attribute.StringSlice(attrFinishReasons, []string{clipName(resp.FinishReason)}),
				attribute.Int(attrToolCalls, len(resp.Message.ToolCalls)))
		}
		span.End()
	}
}
