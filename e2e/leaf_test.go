package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/internal/natstest"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// TestEdgeWorkerOnLeafNode: a toolworker connected to a leaf node (its own
// nats-server, joined to the hub as a leaf, with no JetStream of its own)
// serves the calls of a coordinator on the hub, in the hub's JetStream
// domain. The leaf link is cut while both calls run and stays down until
// both have finished, so their results are published across an outage;
// then it is restored: each call is answered once, by the edge worker, the
// non-idempotent one ran exactly once, and the run ends naturally.
func TestEdgeWorkerOnLeafNode(t *testing.T) {
	t.Parallel()
	hub := natstest.StartHub(t, "hub")
	f := newFleetOn(t, hub)
	link := newProxy(t, fmt.Sprintf("nats://127.0.0.1:%d", natstest.LeafPort(t, hub)))
	leaf := natstest.StartLeaf(t, strings.TrimPrefix(link.url(), "nats://"))

	edge := startProc(t, "edge", bins.toolworker, "--nats-url", leaf.ClientURL(), "--js-domain", "hub",
		"--tools", f.manifest, "--name", "edge", "--ack-wait", testAckWait.String(), "--log-level", "debug")
	edge.waitLog(30*time.Second, "worker started")

	coord := f.coordinator("coordinator", script{
		turn(call("w1", toolWork, map[string]any{"id": "job", "sleep_ms": 2000}),
			call("c1", toolCharge, map[string]any{"id": "pay", "sleep_ms": 2000})),
		final("done"),
	}, "--tool-timeout", "60s")

	f.waitStarted("job", 1, 30*time.Second)
	f.waitStarted("pay", 1, 30*time.Second)
	link.partition()
	natstest.WaitFor(t, 30*time.Second, func() error {
		if leaf.Connected() {
			return fmt.Errorf("the leaf link is still up")
		}
		return nil
	})
	natstest.WaitFor(t, 30*time.Second, func() error {
		for _, id := range []string{"job", "pay"} {
			if runs := f.runsOf(id); len(runs) == 0 || !runs[len(runs)-1].done {
				return fmt.Errorf("call %s has not finished", id)
			}
		}
		return nil
	})
	link.heal()
	leaf.WaitConnected(30 * time.Second)

	res := coord.result(90*time.Second, 0)
	if res.TerminationReason != "natural" {
		t.Fatalf("termination = %q, want natural", res.TerminationReason)
	}
	recs, _ := answered(t, res)
	for _, id := range []string{"w1", "c1"} {
		if rec := recs[id]; rec.Outcome != protocol.OutcomeOK || rec.Worker != "edge" {
			t.Errorf("call %s = %+v, want ok from the edge worker", id, rec)
		}
	}
	if runs := f.runsOf("pay"); len(runs) != 1 || !runs[0].done {
		t.Fatalf("the non-idempotent call ran %d times (%+v), want once, to completion", len(runs), runs)
	}
}
