package tracing

import (
	"context"

	"github.com/toolfleet/toolfleet/internal/tracing/tracemeta"
)

// The _meta carrier lives in tracemeta, which pkg/mcptool imports without
// this package's NATS and SDK dependencies; its bound is this package's.
var _ [MaxHeaderBytes - tracemeta.MaxValueBytes]struct{}
var _ [tracemeta.MaxValueBytes - MaxHeaderBytes]struct{}

// InjectMeta writes ctx's trace context into an MCP request's _meta
// (nothing when ctx has no span or tracing is off). meta must not be nil.
// See [tracemeta.Inject].
func InjectMeta(ctx context.Context, meta map[string]any) { tracemeta.Inject(ctx, meta) }

// ExtractMeta returns ctx with the remote trace context found in an MCP
// request's _meta, if any. A malformed, oversized or non-string value is
// ignored. See [tracemeta.Extract].
func ExtractMeta(ctx context.Context, meta map[string]any) context.Context {
	return tracemeta.Extract(ctx, meta)
}
