// Package tracemeta carries the W3C trace context in an MCP request's
// _meta object. It depends on the OpenTelemetry API alone (no SDK, no
// exporter, no NATS), so that pkg/mcptool, which every MCP client user
// imports, pulls in nothing else; internal/tracing re-exports it.
package tracemeta

import (
	"context"

	"go.opentelemetry.io/otel"
)

// MaxValueBytes bounds a trace context value read from a peer's _meta; it
// equals tracing.MaxHeaderBytes.
const MaxValueBytes = 512

// carrier adapts an MCP request's _meta object to the propagator, as the
// MCP ecosystem carries the W3C trace context: params._meta.traceparent,
// params._meta.tracestate (and baggage). Values that are not strings, or are
// over MaxValueBytes, are ignored: a peer's _meta is untrusted.
type carrier map[string]any

func (m carrier) Get(key string) string {
	v, _ := m[key].(string)
	if len(v) > MaxValueBytes {
		return ""
	}
	return v
}

func (m carrier) Set(key, value string) { m[key] = value }

func (m carrier) Keys() []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	return keys
}

// Inject writes ctx's trace context into an MCP request's _meta (nothing
// when ctx has no span or tracing is off). meta must not be nil.
func Inject(ctx context.Context, meta map[string]any) {
	if meta == nil {
		return
	}
	otel.GetTextMapPropagator().Inject(ctx, carrier(meta))
}

// Extract returns ctx with the remote trace context found in an MCP
// request's _meta, if any. A malformed, oversized or non-string value is
// ignored.
func Extract(ctx context.Context, meta map[string]any) context.Context {
	if len(meta) == 0 {
		return ctx
	}
	return otel.GetTextMapPropagator().Extract(ctx, carrier(meta))
}
