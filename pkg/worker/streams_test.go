package worker_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natstest"
	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/protocol"
	"github.com/toolfleet/toolfleet/pkg/worker"
)

// TestRunRefusesDriftedStreams: a worker that finds a stream configured
// otherwise than expected (here a republish an attacker added) refuses to
// start, naming the stream and field, and changes nothing.
func TestRunRefusesDriftedStreams(t *testing.T) {
	srv := natstest.Start(t)
	nc := natstest.Connect(t, srv)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	subjects := protocol.Subjects{}
	if err := natsbus.EnsureStreams(t.Context(), js, subjects, natsbus.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	var results jetstream.StreamConfig
	for _, fs := range natsbus.FleetStreams(subjects, natsbus.StreamConfig{}) {
		if fs.Config.Name == subjects.ResultsStream() {
			results = fs.Config
		}
	}
	bad := results
	bad.RePublish = &jetstream.RePublish{Source: ">", Destination: "stolen.>"}
	if _, err := js.UpdateStream(t.Context(), bad); err != nil {
		t.Fatal(err)
	}
	w, err := worker.New(nc, worker.Config{Tools: []harness.Tool{harness.Echo()}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	err = w.Run(ctx)
	var de *natsbus.DriftError
	if !errors.As(err, &de) || !strings.Contains(err.Error(), "FLEET_RESULTS republish") {
		t.Fatalf("Run = %v, want a drift error naming FLEET_RESULTS republish", err)
	}
	st, err := js.Stream(t.Context(), subjects.ResultsStream())
	if err != nil || st.CachedInfo().Config.RePublish == nil {
		t.Fatalf("the worker changed the stream: %v", err)
	}
}

// TestRunHoldsBackWhileDrifted: a stream rewritten under a serving worker
// (a republish on FLEET_RESULTS) makes the worker not ready, naming the
// stream, until the stream is restored; the same call then runs.
func TestRunHoldsBackWhileDrifted(t *testing.T) {
	srv := natstest.Start(t)
	nc := natstest.Connect(t, srv)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	subjects := protocol.Subjects{}
	w, err := worker.New(nc, worker.Config{Tools: []harness.Tool{harness.Echo()}, StreamCheckInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	natstest.WaitFor(t, 10*time.Second, func() error { return w.Ready(t.Context()) })

	var results jetstream.StreamConfig
	for _, fs := range natsbus.FleetStreams(subjects, natsbus.StreamConfig{}) {
		if fs.Config.Name == subjects.ResultsStream() {
			results = fs.Config
		}
	}
	bad := results
	bad.RePublish = &jetstream.RePublish{Source: ">", Destination: "stolen.>"}
	if _, err := js.UpdateStream(t.Context(), bad); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		if err := w.Ready(t.Context()); err == nil || !strings.Contains(err.Error(), "FLEET_RESULTS") {
			return fmt.Errorf("Ready = %v with FLEET_RESULTS rewritten, want an error naming it", err)
		}
		return nil
	})
	if _, err := js.UpdateStream(t.Context(), results); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 10*time.Second, func() error { return w.Ready(t.Context()) })
	if r := callTool(t, nc, "echo", `{"text":"back"}`, 10*time.Second); r.Outcome != protocol.OutcomeOK || r.Output != "back" {
		t.Fatalf("echo after the stream was restored: %+v", r)
	}
}
