package mcptool_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/toolfleet/toolfleet/internal/tracing"
	"github.com/toolfleet/toolfleet/internal/tracing/tracingtest"
	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/mcptool"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// tracedServer is an in-process go-sdk server whose echo tool opens a span
// from the trace context its request's _meta carries, as a traced MCP
// server does, and records the _meta keys it got.
func tracedServer(t *testing.T, tp *sdktrace.TracerProvider) (*httptest.Server, func() []map[string]any) {
	var mu sync.Mutex
	var metas []map[string]any
	s := mcp.NewServer(&mcp.Implementation{Name: "traced", Version: "1"}, nil)
	s.AddTool(&mcp.Tool{Name: "echo", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
		InputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}}}`)},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			mu.Lock()
			metas = append(metas, req.Params.Meta)
			mu.Unlock()
			_, span := tp.Tracer("server").Start(tracing.ExtractMeta(ctx, req.Params.Meta), "server echo")
			span.End()
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ok"}}}, nil
		})
	srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, &mcp.StreamableHTTPOptions{Stateless: true}))
	t.Cleanup(srv.Close)
	return srv, func() []map[string]any { mu.Lock(); defer mu.Unlock(); return append([]map[string]any(nil), metas...) }
}

// A tools/call carries the worker's trace context in params._meta: the
// server's span is a child of the call's client span, itself a child of the
// worker's span; no argument value reaches an attribute.
func TestCallCarriesTheTraceContextInMeta(t *testing.T) {
	exp, tp := tracingtest.Install(t)
	srv, metas := tracedServer(t, tp)
	s, err := mcptool.Start(context.Background(), mcptool.ServerConfig{Name: "tr", URL: srv.URL})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	defer s.Close()
	h, err := harness.New(harness.Config{}, s.Tools()...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, parent := tp.Tracer("worker").Start(context.Background(), "execution")
	r := h.Execute(ctx, harness.Call{Tool: "tr_echo", Arguments: []byte(`{"text":"` + canary + `"}`), Deadline: time.Now().Add(20 * time.Second)})
	parent.End()
	want(t, r, protocol.OutcomeOK, "")

	tracingtest.NoAttributeContains(t, exp.GetSpans(), canary)
	spans := tracingtest.ByName(exp.GetSpans())
	client, ok := spans["tools/call tr_echo"]
	if !ok {
		t.Fatalf("no client span among %d spans", len(spans))
	}
	server := spans["server echo"]
	tid := parent.SpanContext().TraceID()
	if client.Parent.SpanID() != parent.SpanContext().SpanID() || client.SpanContext.TraceID() != tid {
		t.Errorf("client span's parent %v, want the worker's span %v", client.Parent.SpanID(), parent.SpanContext().SpanID())
	}
	if !server.Parent.IsRemote() || server.Parent.SpanID() != client.SpanContext.SpanID() || server.SpanContext.TraceID() != tid {
		t.Errorf("server span's parent %v (remote %v), want the client span %v", server.Parent.SpanID(), server.Parent.IsRemote(), client.SpanContext.SpanID())
	}
	var attrs []string
	for _, a := range client.Attributes {
		attrs = append(attrs, string(a.Key)+"="+a.Value.Emit())
	}
	if got := strings.Join(attrs, " "); !strings.Contains(got, "mcp.method.name=tools/call") || !strings.Contains(got, "gen_ai.tool.name=tr_echo") {
		t.Errorf("client span attributes: %s", got)
	}

	m := metas()
	if len(m) != 1 {
		t.Fatalf("%d calls seen", len(m))
	}
	if tok, _ := m[0]["progressToken"].(string); !strings.HasPrefix(tok, "tr-") {
		t.Errorf("_meta lost the progress token: %v", m[0])
	}
	if tpv, _ := m[0]["traceparent"].(string); !strings.Contains(tpv, tid.String()) {
		t.Errorf("_meta traceparent %q", tpv)
	}
}
