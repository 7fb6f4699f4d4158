package mcptool

import (
	"context"
	"errors"
	"fmt"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// TracerName is the instrumentation scope of the calls' spans.
const TracerName = "github.com/toolfleet/toolfleet/pkg/mcptool"

// Span attribute keys, after the OpenTelemetry semantic conventions for MCP
// and GenAI.
const (
	AttrMethod    = "mcp.method.name"
	AttrToolName  = "gen_ai.tool.name"
	AttrOperation = "gen_ai.operation.name"
	AttrServer    = "toolfleet.mcp_server"
	AttrErrorType = "error.type"
)

// startCallSpan opens the client span of one tools/call, "tools/call
// <tool>", a child of the worker's execution span. Its context travels to
// the server in params._meta (traceparent, tracestate), so the server's own
// spans join the trace. It carries names and, on failure, the error type —
// never arguments or results. The returned func ends it.
func (s *Server) startCallSpan(ctx context.Context, e *toolEntry) (context.Context, func(error)) {
	ctx, span := otel.GetTracerProvider().Tracer(TracerName).Start(ctx, "tools/call "+e.fleetName,
		trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String(AttrMethod, "tools/call"), attribute.String(AttrToolName, e.fleetName),
			attribute.String(AttrOperation, "execute_tool"), attribute.String(AttrServer, s.cfg.Name)))
	return ctx, func(err error) {
		if err != nil {
			span.SetStatus(codes.Error, "")
			span.SetAttributes(attribute.String(AttrErrorType, errorType(err)))
		}
		span.End()
	}
}

// errorType names a call's failure by its type, never its message.
func errorType(err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "cancelled"
	}
	return fmt.Sprintf("%T", err)
}
