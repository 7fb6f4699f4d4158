package coordinator_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/coordinator"
	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natstest"
	"github.com/toolfleet/toolfleet/internal/toolworker"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/model/scripted"
	"github.com/toolfleet/toolfleet/pkg/protocol"
	"github.com/toolfleet/toolfleet/pkg/worker"
)

// TestDemoOnEmbeddedServer runs the zero-value configuration: an embedded
// server, one in-process worker and the bundled demo script.
func TestDemoOnEmbeddedServer(t *testing.T) {
	c, err := coordinator.Open(t.Context(), coordinator.Config{
		Model:    scripted.Demo(),
		StoreDir: t.TempDir(),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// The embedded server opens no listener unless asked: no process on
	// the machine (nor a tool) can reach it.
	if c.ClientURL() != "" || c.CredentialsFile() != "" {
		t.Fatalf("embedded server listens at %q (credentials %q), want in-process only", c.ClientURL(), c.CredentialsFile())
	}
	res, err := c.Run(t.Context(), "demo")
	if err != nil {
		t.Fatal(err)
	}
	if res.TerminationReason != loop.TerminationNatural {
		t.Fatalf("termination = %q, want natural", res.TerminationReason)
	}
	if want := "(17 + 25) * 3 = 126, 2 ** 10 = 1024, and their sum is 1150."; res.Answer != want {
		t.Fatalf("answer = %q, want %q", res.Answer, want)
	}
	if res.Metadata.Rounds != 3 || res.Metadata.Outcomes[protocol.OutcomeOK] != 3 {
		t.Fatalf("metadata = %+v, want 3 rounds and 3 ok calls", res.Metadata)
	}
}

// TestMultiRoundWithRemoteWorkers runs a coordinator against an external
// server with two separately started workers, and checks that every call was
// answered by one of them and the final answer carries the real results.
func TestMultiRoundWithRemoteWorkers(t *testing.T) {
	srv := natstest.Start(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 2)
	for i := range 2 {
		w := newWorker(t, natstest.Connect(t, srv), fmt.Sprintf("w%d", i+1), "", "calculator", "echo")
		go func() { done <- w.Run(ctx) }()
	}
	t.Cleanup(func() { cancel(); <-done; <-done })
	// The workers publish their tools' specs as they start: the run sees
	// the catalog as it is when it starts, so wait for both tools.
	nc := natstest.Connect(t, srv)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 30*time.Second, func() error {
		kv, err := js.KeyValue(t.Context(), protocol.Subjects{}.CatalogBucket())
		if err != nil {
			return err
		}
		for _, tool := range []string{"calculator", "echo"} {
			if _, err := kv.Get(t.Context(), tool); err != nil {
				return fmt.Errorf("catalog entry %s: %w", tool, err)
			}
		}
		return nil
	})

	script := `{"turns": [
	  {"tool_calls": [
	    {"id": "a", "name": "calculator", "arguments": {"expression": "6 * 7"}},
	    {"id": "b", "name": "calculator", "arguments": {"expression": "2 ** 8"}},
	    {"id": "c", "name": "echo", "arguments": {"text": "hello"}},
	    {"id": "d", "name": "calculator", "arguments": {"expression": "1 / 0"}},
	    {"id": "e", "name": "nope", "arguments": {}},
	    {"id": "f", "name": "calculator", "arguments": {"expression": true}}
	  ]},
	  {"tool_calls": [{"id": "g", "name": "calculator", "arguments": {"expression": "42 + 256"}}]},
	  {"content": "a={{result \"a\"}} b={{result \"b\"}} c={{result \"c\"}} g={{result \"g\"}}"}
	]}`
	model, err := scripted.Parse([]byte(script))
	if err != nil {
		t.Fatal(err)
	}
	c, err := coordinator.Open(t.Context(), coordinator.Config{
		Conn:  natsbus.ConnConfig{URL: srv.ClientURL()},
		Model: model,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	res, err := c.Run(t.Context(), "compute")
	if err != nil {
		t.Fatal(err)
	}
	if want := "a=42 b=256 c=hello g=298"; res.Answer != want {
		t.Fatalf("answer = %q, want %q", res.Answer, want)
	}
	want := map[string]protocol.Outcome{
		"a": protocol.OutcomeOK, "b": protocol.OutcomeOK, "c": protocol.OutcomeOK,
		"d": protocol.OutcomeFailed, "e": protocol.OutcomeUnknownTool,
		"f": protocol.OutcomeInvalidArguments, "g": protocol.OutcomeOK,
	}
	if len(res.Calls) != len(want) {
		t.Fatalf("%d call records, want %d", len(res.Calls), len(want))
	}
	for _, rec := range res.Calls {
		if rec.Outcome != want[rec.CallID] {
			t.Errorf("call %s outcome = %q, want %q", rec.CallID, rec.Outcome, want[rec.CallID])
		}
		if rec.Outcome == protocol.OutcomeOK && rec.Worker != "w1" && rec.Worker != "w2" {
			t.Errorf("call %s answered by %q, want w1 or w2", rec.CallID, rec.Worker)
		}
	}
	answered := map[string]int{}
	for _, m := range res.Messages {
		if m.Role == "tool" {
			answered[m.ToolCallID]++
		}
		if m.Role == "tool" && m.ToolCallID == "d" && !strings.Contains(m.Content, "failed: *harness.EvaluationError") {
			t.Errorf("observation for 1/0 = %q", m.Content)
		}
	}
	for id := range want {
		if answered[id] != 1 {
			t.Errorf("call %s answered %d times, want 1", id, answered[id])
		}
	}
}

// TestCloseDeletesTheResultsConsumers: the results consumer of a
// dispatcher handed out by Fleet (coordinator mcp's) is deleted when the
// coordinator closes, not left for the server to expire.
func TestCloseDeletesTheResultsConsumers(t *testing.T) {
	t.Parallel() // its own server; it waits on the fleet, not the CPU
	srv := natstest.Start(t)
	model, err := scripted.Parse([]byte(`{"turns": [{"content": "done"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	c, err := coordinator.Open(t.Context(), coordinator.Config{Conn: natsbus.ConnConfig{URL: srv.ClientURL()}, Model: model})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	in, err := c.Fleet().Dispatcher.Open(t.Context(), protocol.NewRunID())
	if err != nil {
		t.Fatal(err)
	}
	in.Close()
	js, err := jetstream.New(natstest.Connect(t, srv))
	if err != nil {
		t.Fatal(err)
	}
	consumers := func() int {
		st, err := js.Stream(t.Context(), protocol.Subjects{}.ResultsStream())
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Consumers
	}
	if n := consumers(); n != 1 {
		t.Fatalf("%d consumers of the results stream with a run opened, want 1", n)
	}
	c.Close()
	if n := consumers(); n != 0 {
		t.Fatalf("%d consumers of the results stream after Close, want 0", n)
	}
}

// newWorker returns a worker on nc named name, serving the tools of the
// manifest at path (when set) and the built-in tools builtins names, as
// the coordinator's in-process workers and cmd/toolworker load them.
func newWorker(t *testing.T, nc *nats.Conn, name, path string, builtins ...string) *worker.Worker {
	t.Helper()
	cfg, err := toolworker.Load(worker.Config{Name: name}, path, builtins, nil)
	if err != nil {
		t.Fatal(err)
	}
	w, err := worker.New(nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return w
}
