package tracing

import (
	"context"
	"strings"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel"
)

// MaxHeaderBytes bounds a trace header value read from a message: a
// peer's header is untrusted.
const MaxHeaderBytes = 512

// headerCarrier adapts NATS headers, whose keys are case-sensitive, to the
// propagator: keys are written as the propagator names them
// ("traceparent", "tracestate") and read in any case.
type headerCarrier nats.Header

func (h headerCarrier) Get(key string) string {
	vs := nats.Header(h).Values(key)
	if len(vs) == 0 {
		for k, v := range h {
			if strings.EqualFold(k, key) && len(v) > 0 {
				vs = v
				break
			}
		}
	}
	if len(vs) == 0 || len(vs[0]) > MaxHeaderBytes {
		return ""
	}
	return vs[0]
}

func (h headerCarrier) Set(key, value string) { h[key] = []string{value} }

func (h headerCarrier) Keys() []string {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	return keys
}

// Inject writes ctx's trace context into h (nothing when ctx has no
// recording span or tracing is off).
func Inject(ctx context.Context, h nats.Header) {
	if h == nil {
		return
	}
	otel.GetTextMapPropagator().Inject(ctx, headerCarrier(h))
}

// Extract returns ctx with the remote trace context found in h, if any. A
// malformed or oversized header is ignored.
func Extract(ctx context.Context, h nats.Header) context.Context {
	if h == nil {
		return ctx
	}
	return otel.GetTextMapPropagator().Extract(ctx, headerCarrier(h))
}
