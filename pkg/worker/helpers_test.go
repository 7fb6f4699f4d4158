package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/embedded"
	"github.com/toolfleet/toolfleet/internal/natsbus/dispatch"
	"github.com/toolfleet/toolfleet/internal/natstest"
	"github.com/toolfleet/toolfleet/internal/toolworker"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
	"github.com/toolfleet/toolfleet/pkg/worker"
)

// runWorker runs a worker of cfg, with the tools of the manifest at path
// added (toolworker.Load), on a connection to srv until the test ends, and
// checks that Run then returns without an error.
func runWorker(t *testing.T, srv *embedded.Server, cfg worker.Config, manifest string) {
	t.Helper()
	cfg, err := toolworker.Load(cfg, manifest, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	w, err := worker.New(natstest.Connect(t, srv), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run = %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("Run did not return")
		}
	})
}

// callTool publishes one call of tool through the fleet on nc, with a
// deadline of deadline from now, and returns its result.
func callTool(t *testing.T, nc *nats.Conn, tool protocol.ToolName, args string, deadline time.Duration) protocol.Result {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	d := dispatch.NewDispatcher(nc, js, protocol.Subjects{}, dispatch.DispatcherConfig{})
	ctx, cancel := context.WithTimeout(t.Context(), deadline+30*time.Second)
	defer cancel()
	run := protocol.NewRunID()
	in, err := d.Open(ctx, run)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	c := protocol.Call{V: 1, RunID: run, Round: 1, CallKey: protocol.NewCallKey(), Tool: tool,
		Arguments: []byte(args), Deadline: time.Now().Add(deadline), Attempt: 1}
	if err := d.Publish(ctx, loop.Outgoing{Call: c}); err != nil {
		t.Fatal(err)
	}
	for {
		select {
		case ev := <-in.Events():
			if ev.Result != nil && ev.Result.CallKey == c.CallKey {
				return *ev.Result
			}
		case <-ctx.Done():
			t.Fatalf("no result for %s", tool)
		}
	}
}
