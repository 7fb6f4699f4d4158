package tracing

import (
	"context"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

func TestEnabled(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		want bool
	}{
		{map[string]string{}, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://x:4318/v1/traces"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318", "OTEL_SDK_DISABLED": "true"}, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318", "OTEL_TRACES_EXPORTER": "none"}, false},
	} {
		for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER"} {
			t.Setenv(k, c.env[k])
		}
		if got := Enabled(); got != c.want {
			t.Fatalf("Enabled() with %v = %v", c.env, got)
		}
	}
}

// The trace context crosses a NATS header as W3C traceparent; a hostile
// header is ignored.
func TestInjectExtract(t *testing.T) {
	otel.SetTextMapPropagator(propagation.TraceContext{})
	tp := sdktrace.NewTracerProvider()
	ctx, span := tp.Tracer("t").Start(context.Background(), "call")
	defer span.End()
	h := nats.Header{}
	Inject(ctx, h)
	if v := h.Get("traceparent"); !strings.HasPrefix(v, "00-"+span.SpanContext().TraceID().String()) {
		t.Fatalf("traceparent %q", v)
	}
	got := trace.SpanContextFromContext(Extract(context.Background(), h))
	if got.TraceID() != span.SpanContext().TraceID() || got.SpanID() != span.SpanContext().SpanID() || !got.IsRemote() {
		t.Fatalf("extracted %v", got)
	}
	for _, bad := range []string{"garbage", "00-" + strings.Repeat("f", 600), "00-00000000000000000000000000000000-0000000000000000-01"} {
		h := nats.Header{"Traceparent": {bad}}
		if sc := trace.SpanContextFromContext(Extract(context.Background(), h)); sc.IsValid() {
			t.Fatalf("header %q extracted as %v", bad[:min(len(bad), 20)], sc)
		}
	}
}
