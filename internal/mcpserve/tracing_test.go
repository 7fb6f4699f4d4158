package mcpserve_test

import (
	"context"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/toolfleet/toolfleet/internal/tracing"
	"github.com/toolfleet/toolfleet/internal/tracing/tracingtest"
)

const canary = "CANARY-3b9e2f71-argument"

// A tools/call whose _meta carries a trace context runs as part of the
// client's trace: the run's span is a child of the client's span, the
// worker's spans join the same trace, and no argument value reaches an
// attribute.
func TestCallJoinsTheClientsTrace(t *testing.T) {
	exp, _ := tracingtest.Install(t)
	f := newFleet(t, 0)
	clientTP := sdktrace.NewTracerProvider() // the client's own process
	ctx, client := clientTP.Tracer("client").Start(context.Background(), "client call")
	meta := mcp.Meta{}
	tracing.InjectMeta(ctx, meta)
	client.End()
	check(t, f.call(t, "echo", `{"text":"`+canary+`"}`, meta), "ok", canary)

	tid := client.SpanContext().TraceID()
	tracingtest.NoAttributeContains(t, exp.GetSpans(), canary)
	spans := tracingtest.ByName(exp.GetSpans())
	run, worker := spans["invoke_agent toolfleet"], spans["execution"]
	if !run.Parent.IsRemote() || run.Parent.SpanID() != client.SpanContext().SpanID() || run.SpanContext.TraceID() != tid {
		t.Errorf("the run's span has parent %v (remote %v) in trace %v, want the client's span %v in %v",
			run.Parent.SpanID(), run.Parent.IsRemote(), run.SpanContext.TraceID(), client.SpanContext().SpanID(), tid)
	}
	if worker.SpanContext.TraceID() != tid {
		t.Errorf("the worker's execution span is not in the client's trace")
	}

	// A call without a trace context starts a trace of its own.
	exp.Reset()
	check(t, f.call(t, "echo", `{"text":"alone"}`, mcp.Meta{"traceparent": "00-garbage"}), "ok", "alone")
	for _, sp := range exp.GetSpans() {
		if sp.Name == "invoke_agent toolfleet" && (sp.Parent.IsValid() || sp.SpanContext.TraceID() == tid) {
			t.Errorf("a call with a malformed traceparent joined trace %v", sp.Parent.TraceID())
		}
	}
}
