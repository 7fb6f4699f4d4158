package coordinator_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/coordinator"
	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natsbus/stores"
	"github.com/toolfleet/toolfleet/internal/natstest"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// TestWaitResultOutlivesItsNode waits for a run's result (WaitResult) on
// a 3-node cluster (the runs bucket R3) through a connection to one node,
// and shuts that node down while it waits; the result is stored, by a
// connection to the others, while the node is down, after the runs
// bucket's leader was asked to step down. The waiter gets the result as
// stored, on the nodes left.
func TestWaitResultOutlivesItsNode(t *testing.T) {
	c := natstest.StartCluster(t, 3)
	s := protocol.Subjects{}
	connect := func(url string) jetstream.JetStream {
		nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		return js
	}
	admin := connect(c.URLs())
	natstest.WaitFor(t, time.Minute, func() error {
		actx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		if _, err := natsbus.Provision(actx, admin, s, natsbus.StreamConfig{Replicas: 3}); err != nil {
			return fmt.Errorf("waiting for the cluster to place three replicas: %w", err)
		}
		return nil
	})
	bucket := "KV_" + s.RunsBucket()
	natstest.WaitStreamsCurrent(t, admin, time.Minute, bucket)

	const node = 0
	waiter := connect(c.ClientURL(node))
	run := protocol.NewRunID()
	key := protocol.RunKey("default", run)
	type waited struct {
		res  protocol.RunResult
		data []byte
		err  error
	}
	got := make(chan waited, 1)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	go func() {
		res, data, err := coordinator.WaitResult(ctx, waiter, s, key)
		got <- waited{res, data, err}
	}()
	natstest.WaitFor(t, time.Minute, func() error {
		if waiter.Conn().NumSubscriptions() == 0 {
			return fmt.Errorf("waiting for WaitResult to subscribe")
		}
		return nil
	})
	c.Kill(node)
	natstest.StepDownStream(t, admin, bucket, time.Minute)
	data, err := protocol.Encode(&protocol.RunResult{V: protocol.Version, RunID: run, Answer: "done", TerminationReason: "natural"})
	if err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, time.Minute, func() error {
		results, err := stores.OpenRunResults(t.Context(), admin, s)
		if err != nil {
			return fmt.Errorf("opening the runs bucket: %w", err)
		}
		actx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		if _, err := results.Create(actx, key, data); err != nil {
			return fmt.Errorf("storing the result: %w", err)
		}
		return nil
	})
	w := <-got
	switch {
	case w.err != nil:
		t.Fatalf("WaitResult with its node down: %v", w.err)
	case w.res.RunID != run || w.res.Answer != "done" || string(w.data) != string(data):
		t.Fatalf("WaitResult = %+v, %s; want run %s's result as stored, %s", w.res, w.data, run, data)
	}
}
