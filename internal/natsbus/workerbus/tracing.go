package workerbus

import (
	"context"
	"errors"
	"reflect"
	"sync/atomic"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/tracing"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// tracerName is the instrumentation scope of the worker's spans.
const tracerName = "github.com/toolfleet/toolfleet/internal/natsbus/workerbus"

// callTrace is the worker's spans of one delivered call: a consumer span,
// child of the coordinator's call span whose context the call's headers
// carry, with children for the queue wait, validation, execution and the
// result's publish. Attributes are ids, names, outcomes and durations only.
type callTrace struct {
	ctx  context.Context
	span trace.Span
	// callID is the model's id of the accepted call; outcome is the
	// finished call's, "not_run" until then.
	callID  protocol.CallID
	outcome string
}

// callSpanName is the name of the span of a delivery of tool's call,
// made once per tool (toolConsumer.spanName).
func callSpanName(tool protocol.ToolName) string { return "execute_tool " + string(tool) }

// callSpanOptions are the options of every delivery's span, made once.
var callSpanOptions = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer)}

// startCallTrace opens the span of a delivery of tc's call. When the
// span does not record (no SDK provider installed, or the trace not
// sampled), its children are not started either: a child of an unsampled
// span is never sampled, so nothing that would be recorded is lost.
func startCallTrace(ctx context.Context, tc *toolConsumer, m jetstream.Msg) callTrace {
	ctx = tracing.Extract(ctx, m.Headers())
	tr := workerTracer()
	ctx, span := tr.Start(ctx, tc.spanName, callSpanOptions...)
	ct := callTrace{ctx: ctx, span: span, outcome: notRun}
	if !span.IsRecording() {
		return ct // no exporter, or not sampled: nothing more to build
	}
	span.SetAttributes(attribute.String("gen_ai.operation.name", "execute_tool"), attribute.String("gen_ai.tool.name", string(tc.name)),
		attribute.String("messaging.system", "nats"), attribute.String("messaging.destination.name", m.Subject()))
	if md, err := m.Metadata(); err == nil && !md.Timestamp.IsZero() {
		_, q := tr.Start(ctx, "queue wait", trace.WithTimestamp(md.Timestamp))
		q.SetAttributes(attribute.Int("toolfleet.attempt", max(int(md.NumDelivered), 1)))
		q.End()
	}
	return ct
}

// tracerCache is the worker's tracer of one tracer provider.
type tracerCache struct {
	tp trace.TracerProvider
	tr trace.Tracer
}

// cachedTracer holds the tracer of the provider last seen.
var cachedTracer atomic.Pointer[tracerCache]

// workerTracer is the global provider's tracer of this package, looked up
// again only when the global provider changes: a provider returns the same
// tracer for the same name, and looking it up takes a lock.
func workerTracer() trace.Tracer {
	tp := otel.GetTracerProvider()
	if c := cachedTracer.Load(); c != nil && c.tp == tp {
		return c.tr
	}
	tr := tp.Tracer(tracerName)
	if reflect.TypeOf(tp).Comparable() { // == on it must not panic
		cachedTracer.Store(&tracerCache{tp: tp, tr: tr})
	}
	return tr
}

// notRun is the outcome attribute of a delivery whose call did not run.
const notRun = "not_run"

// noSpan ends a child span that was not started.
func noSpan(string) {}

// child runs a child span named name around the caller's step; the
// returned func ends it, marking an error (by kind only) when failed.
func (ct *callTrace) child(name string) func(failed string) {
	if !ct.span.IsRecording() {
		return noSpan
	}
	_, span := workerTracer().Start(ct.ctx, name)
	return func(failed string) {
		if failed != "" {
			span.SetStatus(codes.Error, "")
			span.SetAttributes(attribute.String("error.type", failed))
		}
		span.End()
	}
}

// record is the span's sink of the delivery's events: a started call's
// ids as attributes, a finished call's outcome, and a span event for a
// call terminated or skipped or a result that could not be published.
func (ct *callTrace) record(ev CallEvent) {
	if !ct.span.IsRecording() {
		return
	}
	switch ev.Kind {
	case CallStarted:
		ct.span.SetAttributes(attribute.String("gen_ai.tool.call.id", clipCallID(string(ct.callID))), attribute.String("toolfleet.call_key", string(ev.CallKey)),
			attribute.String("toolfleet.run_id", string(ev.RunID)), attribute.Int("toolfleet.attempt", ev.Attempt))
	case CallFinished:
		ct.outcome = string(ev.Outcome)
	case CallTerminated, CallSkipped:
		ct.span.AddEvent(ev.Kind.String(), trace.WithAttributes(attribute.String("toolfleet.reason", ev.Reason)))
	case ResultFailed:
		ct.span.AddEvent(ev.Kind.String())
	}
}

// end closes the delivery's span with its call's outcome, or "not_run".
func (ct *callTrace) end() {
	if ct.span.IsRecording() {
		ct.span.SetAttributes(attribute.String("toolfleet.outcome", ct.outcome))
		if ct.outcome != string(protocol.OutcomeOK) {
			ct.span.SetStatus(codes.Error, "")
		}
	}
	ct.span.End()
}

// clipCallID bounds a model-supplied call id on a span.
func clipCallID(s string) string {
	if len(s) > protocol.MaxCallIDLen {
		return s[:protocol.MaxCallIDLen]
	}
	return s
}

// traceErr is err's code for a span, "" for nil.
func traceErr(err error) string {
	if err == nil {
		return ""
	}
	if errors.Is(err, errExpired) {
		return "expired"
	}
	return natsbus.ErrorCode(err)
}
