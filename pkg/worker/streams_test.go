package worker_test

import (
	"context"
	"errors"
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
