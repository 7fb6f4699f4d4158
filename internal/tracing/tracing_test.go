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

// The trace context crosses an MCP _meta as the MCP ecosystem carries it;
// hostile values are ignored.
func TestInjectExtractMeta(t *testing.T) {
	otel.SetTextMapPropagator(propagation.TraceContext{})
	tp := sdktrace.NewTracerProvider()
	ctx, span := tp.Tracer("t").Start(context.Background(), "call")
	defer span.End()
	meta := map[string]any{"progressToken": "p1"}
	InjectMeta(ctx, meta)
	if v, _ := meta["traceparent"].(string); !strings.HasPrefix(v, "00-"+span.SpanContext().TraceID().String()) {
		t.Fatalf("_meta %v", meta)
	}
	if meta["progressToken"] != "p1" {
		t.Fatalf("InjectMeta changed another key: %v", meta)
	}
	got := trace.SpanContextFromContext(ExtractMeta(context.Background(), meta))
	if got.TraceID() != span.SpanContext().TraceID() || got.SpanID() != span.SpanContext().SpanID() || !got.IsRemote() {
		t.Fatalf("extracted %v", got)
	}
	valid := meta["traceparent"].(string)
	for _, bad := range []any{"garbage", "00-" + strings.Repeat("f", 600), 7, map[string]any{"x": valid}, []any{valid}, nil} {
		if sc := trace.SpanContextFromContext(ExtractMeta(context.Background(), map[string]any{"traceparent": bad})); sc.IsValid() {
			t.Fatalf("_meta %v extracted as %v", bad, sc)
		}
	}
}

func FuzzExtractMeta(f *testing.F) {
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	f.Add("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "k=v", "a=b")
	f.Add("", "", "")
	f.Fuzz(func(t *testing.T, tp, ts, bag string) {
		ctx := ExtractMeta(context.Background(), map[string]any{"traceparent": tp, "tracestate": ts, "baggage": bag})
		if sc := trace.SpanContextFromContext(ctx); sc.IsValid() && len(tp) > MaxHeaderBytes {
			t.Fatalf("an oversized traceparent was accepted")
		}
	})
}
