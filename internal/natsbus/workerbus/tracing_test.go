package workerbus

import (
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/toolfleet/toolfleet/internal/tracing/tracingtest"
)

// A recorded delivery has its span, child of the coordinator's, with
// queue wait, validation, execution and result publish below it, and the
// call's ids and outcome; a provider installed later gets the spans of
// the calls after it.
func TestCallTraceSpans(t *testing.T) {
	for range 2 { // a second provider: the worker's tracer follows it
		exp, _ := tracingtest.Install(t)
		m, c := newTraceMsg(), benchTraceCall()
		traceCall(m, c)
		spans := tracingtest.ByName(exp.GetSpans())
		if len(exp.GetSpans()) != 5 {
			t.Fatalf("%d spans, want 5", len(exp.GetSpans()))
		}
		call, ok := spans["execute_tool echo"]
		if !ok {
			t.Fatal("no execute_tool span")
		}
		if got := call.Parent.TraceID().String(); got != "4bf92f3577b34da6a3ce929d0e0e4736" {
			t.Fatalf("call span in trace %s, want the coordinator's", got)
		}
		attrs := map[attribute.Key]string{}
		for _, a := range call.Attributes {
			attrs[a.Key] = a.Value.Emit()
		}
		for k, want := range map[attribute.Key]string{
			"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "echo", "messaging.system": "nats",
			"messaging.destination.name": "toolfleet.call.echo", "gen_ai.tool.call.id": "call_1",
			"toolfleet.call_key": string(c.CallKey), "toolfleet.run_id": string(c.RunID), "toolfleet.attempt": "1",
			"toolfleet.outcome": "ok",
		} {
			if attrs[k] != want {
				t.Errorf("call span %s = %q, want %q", k, attrs[k], want)
			}
		}
		for _, n := range []string{"queue wait", "validation", "execution", "result publish"} {
			s, ok := spans[n]
			if !ok {
				t.Fatalf("no %q span", n)
			}
			if s.Parent.SpanID() != call.SpanContext.SpanID() {
				t.Errorf("%q is not a child of the call span", n)
			}
		}
	}
}

// A delivery whose span is not sampled records nothing, children included.
func TestCallTraceNotSampled(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSampler(sdktrace.NeverSample()))
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	t.Cleanup(func() {
		otel.SetTracerProvider(prev)
		_ = tp.Shutdown(t.Context())
	})
	traceCall(newTraceMsg(), benchTraceCall())
	if n := len(exp.GetSpans()); n != 0 {
		t.Fatalf("%d spans recorded, want none", n)
	}
}
