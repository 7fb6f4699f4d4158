package e2e

import (
	"bytes"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// otlpReceiver is a minimal OTLP/HTTP trace receiver: it keeps every
// request body and the spans in it, by service.
type otlpReceiver struct {
	srv    *httptest.Server
	mu     sync.Mutex
	bodies [][]byte
	spans  map[string][]*tracepb.Span // service.name → spans
}

func startOTLPReceiver(t *testing.T) *otlpReceiver {
	r := &otlpReceiver{spans: map[string][]*tracepb.Span{}}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(req.Body)
		if err != nil || req.URL.Path != "/v1/traces" {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		var ex coltrace.ExportTraceServiceRequest
		if err := proto.Unmarshal(body, &ex); err != nil {
			http.Error(w, "not an export request", http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		r.bodies = append(r.bodies, body)
		for _, rs := range ex.ResourceSpans {
			service := ""
			for _, a := range rs.GetResource().GetAttributes() {
				if a.Key == "service.name" {
					service = a.GetValue().GetStringValue()
				}
			}
			for _, ss := range rs.ScopeSpans {
				r.spans[service] = append(r.spans[service], ss.Spans...)
			}
		}
		r.mu.Unlock()
		out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *otlpReceiver) env(service string) []string {
	return []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + r.srv.URL, "OTEL_SERVICE_NAME=" + service, "OTEL_BSP_SCHEDULE_DELAY=100"}
}

func (r *otlpReceiver) snapshot() (map[string][]*tracepb.Span, [][]byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	spans := map[string][]*tracepb.Span{}
	for k, v := range r.spans {
		spans[k] = append([]*tracepb.Span(nil), v...)
	}
	return spans, append([][]byte(nil), r.bodies...)
}

func attr(s *tracepb.Span, key string) string {
	for _, a := range s.Attributes {
		if a.Key == key {
			if v := a.GetValue().GetStringValue(); v != "" {
				return v
			}
			return a.GetValue().String()
		}
	}
	return ""
}

// TestTraceAcrossCoordinatorAndWorker runs a coordinator and a toolworker as
// separate processes exporting to an OTLP/HTTP receiver: the run is one
// trace; the worker's span of the call is a child of the coordinator's call
// span, with queue wait, validation, execution and result publish below it;
// no argument value or output reaches any span.
func TestTraceAcrossCoordinatorAndWorker(t *testing.T) {
	t.Parallel()
	const canary = "canary-value-83e1"
	recv := startOTLPReceiver(t)
	f := newFleet(t)
	worker := startProcEnv(t, "w1", recv.env("tf-worker"), bins.toolworker, "--nats-url", f.url(), "--builtin", "echo",
		"--name", "w1", "--ack-wait", testAckWait.String())
	worker.waitLog(time.Minute, "worker started")
	file := f.writeJSON("trace-script.json", map[string]any{"turns": script{
		turn(call("c1", "echo", map[string]any{"text": canary})),
		final("done"),
	}})
	coord := startProcEnv(t, "coordinator", recv.env("tf-coordinator"), bins.coordinator, "run", "--nats-url", f.url(),
		"--workers", "0", "--model", "scripted:"+file, "--output", "json", "e2e prompt")
	res := coord.result(60*time.Second, 0)
	if len(res.Calls) != 1 || res.Calls[0].Outcome != protocol.OutcomeOK {
		t.Fatalf("calls %+v", res.Calls)
	}
	worker.stop(15 * time.Second) // flushes its spans

	spans, bodies := recv.snapshot()
	cs, ws := spans["tf-coordinator"], spans["tf-worker"]
	names := func(ss []*tracepb.Span) map[string]*tracepb.Span {
		m := map[string]*tracepb.Span{}
		for _, s := range ss {
			m[s.Name] = s
		}
		return m
	}
	cn, wn := names(cs), names(ws)
	for _, n := range []string{"invoke_agent toolfleet", "round", "chat", "execute_tool echo"} {
		if cn[n] == nil {
			t.Fatalf("coordinator span %q missing; got %v", n, strings.Join(keys(cn), ", "))
		}
	}
	for _, n := range []string{"execute_tool echo", "queue wait", "validation", "execution", "result publish"} {
		if wn[n] == nil {
			t.Fatalf("worker span %q missing; got %v", n, strings.Join(keys(wn), ", "))
		}
	}
	trace := cn["invoke_agent toolfleet"].TraceId
	for _, s := range append(append([]*tracepb.Span(nil), cs...), ws...) {
		if !bytes.Equal(s.TraceId, trace) {
			t.Fatalf("span %q is in trace %s, want the run's %s", s.Name, hex.EncodeToString(s.TraceId), hex.EncodeToString(trace))
		}
	}
	callSpan, workerSpan := cn["execute_tool echo"], wn["execute_tool echo"]
	if !bytes.Equal(workerSpan.ParentSpanId, callSpan.SpanId) {
		t.Fatalf("the worker's span is not a child of the coordinator's call span")
	}
	for _, n := range []string{"queue wait", "validation", "execution", "result publish"} {
		if !bytes.Equal(wn[n].ParentSpanId, workerSpan.SpanId) {
			t.Fatalf("worker span %q is not a child of the worker's call span", n)
		}
	}
	if attr(callSpan, "gen_ai.tool.name") != "echo" || attr(callSpan, "gen_ai.tool.call.id") != "c1" ||
		attr(callSpan, "gen_ai.operation.name") != "execute_tool" || attr(callSpan, "toolfleet.outcome") != "ok" {
		t.Fatalf("call span attributes %v", callSpan.Attributes)
	}
	if attr(cn["chat"], "gen_ai.operation.name") != "chat" {
		t.Fatalf("model span attributes %v", cn["chat"].Attributes)
	}
	for _, b := range bodies {
		if bytes.Contains(b, []byte(canary)) {
			t.Fatal("an argument value or output reached the exported spans")
		}
	}
}
