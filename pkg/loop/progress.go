package loop

import (
	"context"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// ProgressFunc receives the progress reports of a run's calls, for whoever
// waits for the run: a terminal, the run's client, an MCP client. It is
// called from the transport's goroutines, so it must be quick, must not
// block, and must be safe for concurrent use. Reports are untrusted text
// and never reach the model's transcript.
type ProgressFunc func(protocol.Progress)

type progressKey struct{}

// WithProgress returns a context under which a run's calls' progress
// reports go to f: a [Dispatcher] that can carry progress reads it in
// Open (ProgressFrom) and passes the reports of the run's calls to it,
// bounded in rate. The loop fills in each report's call id and tool, and
// adds it to the call's span as an event.
func WithProgress(ctx context.Context, f ProgressFunc) context.Context {
	if f == nil {
		return ctx
	}
	return context.WithValue(ctx, progressKey{}, f)
}

// ProgressFrom returns the progress sink of ctx, or nil.
func ProgressFrom(ctx context.Context) ProgressFunc {
	f, _ := ctx.Value(progressKey{}).(ProgressFunc)
	return f
}

// progressCall is what a progress report of one call is told about it.
type progressCall struct {
	id   protocol.CallID
	tool protocol.ToolName
	span trace.Span
}

// progressCalls maps the run's published calls to what their reports
// carry; it is read from the transport's goroutines.
type progressCalls struct {
	on    bool
	calls sync.Map // protocol.CallKey → progressCall
}

// progressContext wraps ctx's progress sink, if any, so that each report
// names its call and tool and becomes an event of the call's span. Reports
// for calls the run did not publish are dropped.
func (ru *run) progressContext(ctx context.Context) context.Context {
	f := ProgressFrom(ctx)
	if f == nil {
		return ctx
	}
	ru.progress.on = true
	return WithProgress(ctx, func(p protocol.Progress) {
		v, ok := ru.progress.calls.Load(p.CallKey)
		if !ok || p.RunID != ru.id {
			return
		}
		c := v.(progressCall)
		p.CallID, p.Tool = c.id, c.tool
		if c.span != nil {
			c.span.AddEvent("tool.progress", trace.WithAttributes(
				attribute.Int64("toolfleet.progress.seq", int64(p.Seq)),
				attribute.Int64("toolfleet.progress.dropped", int64(p.Dropped)),
				attribute.Int("toolfleet.progress.bytes", len(p.Message))))
		}
		f(p)
	})
}
