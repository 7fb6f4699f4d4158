package loop_test

import (
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/loop/looptest"
)

func tracedRun(t *testing.T, traceArgs bool, canary string) []sdktrace.ReadOnlySpan {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(t.Context()) })
	cfg := fastConfig()
	cfg.TracerProvider, cfg.TraceArgs = tp, traceArgs
	model := looptest.NewModel(
		looptest.Calls(looptest.Call("c1", "echo", `{"text":"`+canary+`"}`), looptest.Call("c2", "add", `{"a":"`+canary+`"}`), looptest.Call("c3", "nope", `{}`)),
		looptest.Answer("done "+canary))
	e := newEnv(t, cfg, model, nil, nil)
	if _, err := e.run(t, "prompt "+canary); err != nil {
		t.Fatal(err)
	}
	return exp.GetSpans().Snapshots()
}

// A run's spans: the run, each round, each model call and each tool call,
// in one trace, with GenAI attributes and never an argument value, output,
// prompt or validation message unless TraceArgs.
func TestRunSpans(t *testing.T) {
	const canary = "canary-5c2e"
	spans := tracedRun(t, false, canary)
	byName := map[string][]sdktrace.ReadOnlySpan{}
	var tid trace.TraceID
	for _, s := range spans {
		byName[s.Name()] = append(byName[s.Name()], s)
		if !tid.IsValid() {
			tid = s.SpanContext().TraceID()
		}
		if s.SpanContext().TraceID() != tid {
			t.Fatalf("span %s in another trace", s.Name())
		}
		for _, a := range s.Attributes() {
			if strings.Contains(a.Value.Emit(), canary) {
				t.Fatalf("span %s attribute %s carries the canary", s.Name(), a.Key)
			}
		}
		if strings.Contains(s.Status().Description, canary) {
			t.Fatalf("span %s status carries the canary", s.Name())
		}
	}
	for name, n := range map[string]int{"invoke_agent toolfleet": 1, "round": 2, "chat": 2, "execute_tool echo": 1, "execute_tool add": 1, "execute_tool _unknown": 1} {
		if len(byName[name]) != n {
			t.Fatalf("%d %q spans, want %d (spans: %v)", len(byName[name]), name, n, len(spans))
		}
	}
	run := byName["invoke_agent toolfleet"][0]
	for _, r := range byName["round"] {
		if r.Parent().SpanID() != run.SpanContext().SpanID() {
			t.Fatal("a round is not a child of the run")
		}
	}
	echo := byName["execute_tool echo"][0]
	attrs := map[string]string{}
	for _, a := range echo.Attributes() {
		attrs[string(a.Key)] = a.Value.Emit()
	}
	if attrs[loop.AttrOperation] != "execute_tool" || attrs[loop.AttrToolName] != "echo" || attrs[loop.AttrToolCallID] != "c1" ||
		attrs[loop.AttrOutcome] != "ok" || attrs[loop.AttrCallKey] == "" {
		t.Fatalf("echo span attributes %v", attrs)
	}
	if _, ok := attrs[loop.AttrToolArguments]; ok {
		t.Fatal("arguments without TraceArgs")
	}
	if byName["execute_tool add"][0].Status().Code.String() != "Error" {
		t.Fatal("invalid arguments not an error status")
	}
}

func TestRunSpansTraceArgs(t *testing.T) {
	const canary = "canary-5c2e"
	found := false
	for _, s := range tracedRun(t, true, canary) {
		for _, a := range s.Attributes() {
			if string(a.Key) == loop.AttrToolArguments && strings.Contains(a.Value.Emit(), canary) {
				found = true
			}
		}
	}
	if !found {
		t.Fatal("TraceArgs did not add the argument values")
	}
}

// A call past the per-round cap still has its span, rejected.
func TestCappedCallSpan(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	cfg := fastConfig()
	cfg.TracerProvider, cfg.MaxToolCallsPerRound = tp, 1
	e := newEnv(t, cfg, looptest.NewModel(
		looptest.Calls(looptest.Call("c1", "echo", `{"text":"a"}`), looptest.Call("c2", "echo", `{"text":"b"}`)),
		looptest.Answer("done")), nil, nil)
	if _, err := e.run(t, "go"); err != nil {
		t.Fatal(err)
	}
	outcomes := map[string]string{}
	for _, s := range exp.GetSpans().Snapshots() {
		if s.Name() != "execute_tool echo" {
			continue
		}
		var id, outcome string
		for _, a := range s.Attributes() {
			switch string(a.Key) {
			case loop.AttrToolCallID:
				id = a.Value.Emit()
			case loop.AttrOutcome:
				outcome = a.Value.Emit()
			}
		}
		outcomes[id] = outcome
	}
	if outcomes["c1"] != "ok" || outcomes["c2"] != "rejected" {
		t.Fatalf("call spans %v", outcomes)
	}
}
