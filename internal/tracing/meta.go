package tracing

import (
	"context"

	"go.opentelemetry.io/otel"
)

// metaCarrier adapts an MCP request's _meta object to the propagator, as the
// MCP ecosystem carries the W3C trace context: params._meta.traceparent,
// params._meta.tracestate (and baggage). Values that are not strings, or are
// over MaxHeaderBytes, are ignored: a peer's _meta is untrusted.
type metaCarrier map[string]any

func (m metaCarrier) Get(key string) string {
	v, _ := m[key].(string)
	if len(v) > MaxHeaderBytes {
		return ""
	}
	return v
}

func (m metaCarrier) Set(key, value string) { m[key] = value }

func (m metaCarrier) Keys() []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	return keys
}

// InjectMeta writes ctx's trace context into an MCP request's _meta
// (nothing when ctx has no span or tracing is off). meta must not be nil.
func InjectMeta(ctx context.Context, meta map[string]any) {
	if meta == nil {
		return
	}
	otel.GetTextMapPropagator().Inject(ctx, metaCarrier(meta))
}

// ExtractMeta returns ctx with the remote trace context found in an MCP
// request's _meta, if any. A malformed, oversized or non-string value is
// ignored.
func ExtractMeta(ctx context.Context, meta map[string]any) context.Context {
	if len(meta) == 0 {
		return ctx
	}
	return otel.GetTextMapPropagator().Extract(ctx, metaCarrier(meta))
}
