package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/internal/natstest"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// TestFleetOnAClusterSurvivesNodeLoss runs a fleet on a 3-node JetStream
// cluster with every stream provisioned with three replicas. A four-round
// run has an idempotent and a non-idempotent call in flight in each round
// while one node is killed: the leader of FLEET_CALLS, the leader of
// FLEET_RESULTS, the node the coordinator is connected to, the node the
// worker running the calls is connected to; each comes back before the
// next round. Every call id is answered once, ok; each non-idempotent call
// ran once; no call was stored twice. Then one node stays down and the
// fleet serves another run on the other two.
func TestFleetOnAClusterSurvivesNodeLoss(t *testing.T) {
	// Not parallel: the coordinator's journal appends wait a bounded time
	// for a new stream leader, and elections slow down on a starved machine.
	c := natstest.StartCluster(t, 3)
	f := newFleetAt(t, c.URLs())
	if code := startProc(t, "provision", bins.coordinator, "provision", "--nats-url", c.URLs(), "--replicas", "3").wait(time.Minute); code != 0 {
		t.Fatalf("coordinator provision --replicas 3 exited %d", code)
	}
	workers := map[int]string{}
	for _, name := range []string{"w1", "w2"} {
		p := startProc(t, name, bins.toolworker, "--nats-url", c.URLs(), "--tools", f.manifest, "--name", name,
			"--ack-wait", testAckWait.String(), "--log-level", "debug")
		p.waitLog(30*time.Second, "worker started")
		workers[p.pid()] = name
	}

	const rounds = 4
	var s script
	for k := 1; k <= rounds; k++ {
		s = append(s, turn(
			call(fmt.Sprintf("w%d", k), toolWork, map[string]any{"id": fmt.Sprintf("work-%d", k), "sleep_ms": 1500}),
			call(fmt.Sprintf("c%d", k), toolCharge, map[string]any{"id": fmt.Sprintf("charge-%d", k), "sleep_ms": 1500}),
		))
	}
	s = append(s, final("done"))
	coord := f.coordinator("coordinator", s, "--tool-timeout", "60s")

	targets := []struct {
		what string
		node func(k int) int
	}{
		{"the FLEET_CALLS leader", func(int) int { return c.WaitForStreamLeader("", "FLEET_CALLS", 30*time.Second) }},
		{"the FLEET_RESULTS leader", func(int) int { return c.WaitForStreamLeader("", "FLEET_RESULTS", 30*time.Second) }},
		{"the coordinator's node", func(int) int { return c.NodeOf("toolfleet-coordinator") }},
		{"the worker's node", func(k int) int {
			name := workers[f.runsOf(fmt.Sprintf("charge-%d", k))[0].ppid]
			return c.NodeOf("toolfleet-toolworker-" + name)
		}},
	}
	for k, target := range targets {
		round := k + 1
		f.waitStarted(fmt.Sprintf("work-%d", round), 1, time.Minute)
		f.waitStarted(fmt.Sprintf("charge-%d", round), 1, time.Minute)
		node := target.node(round)
		if node < 0 {
			t.Fatalf("round %d: no node is %s", round, target.what)
		}
		t.Logf("round %d: killing node %d, %s", round, node, target.what)
		c.Kill(node)
		natstest.WaitFor(t, time.Minute, func() error {
			for _, id := range []string{"work", "charge"} {
				if runs := f.runsOf(fmt.Sprintf("%s-%d", id, round)); !runs[len(runs)-1].done {
					return fmt.Errorf("round %d: %s still running", round, id)
				}
			}
			return nil
		})
		c.Restart(node)
		c.WaitForMetaLeader(time.Minute)
	}

	res := coord.result(2*time.Minute, 0)
	if res.TerminationReason != "natural" {
		t.Fatalf("termination = %q, want natural", res.TerminationReason)
	}
	recs, _ := answered(t, res)
	for k := 1; k <= rounds; k++ {
		for _, id := range []string{fmt.Sprintf("w%d", k), fmt.Sprintf("c%d", k)} {
			if recs[id].Outcome != protocol.OutcomeOK {
				t.Errorf("call %s = %+v, want ok", id, recs[id])
			}
		}
		if runs := f.runsOf(fmt.Sprintf("charge-%d", k)); len(runs) != 1 {
			t.Errorf("charge-%d ran %d times, want once: %+v", k, len(runs), runs)
		}
	}
	if n := f.callsStored(); n != 2*rounds {
		t.Errorf("the calls stream stored %d calls, want %d: one was published twice", n, 2*rounds)
	}

	// One node stays down: the fleet serves on two.
	c.Kill(2)
	again := f.coordinator("coordinator-on-two", script{
		turn(call("a", toolWork, map[string]any{"id": "after"}), call("b", toolCharge, map[string]any{"id": "after-charge"})),
		final("done"),
	}, "--tool-timeout", "60s")
	res = again.result(2*time.Minute, 0)
	recs, _ = answered(t, res)
	if res.TerminationReason != "natural" || recs["a"].Outcome != protocol.OutcomeOK || recs["b"].Outcome != protocol.OutcomeOK {
		t.Fatalf("with a node down: %s, calls %+v", res.TerminationReason, recs)
	}
	if runs := f.runsOf("after-charge"); len(runs) != 1 {
		t.Fatalf("the charge of the run on two nodes ran %d times, want once", len(runs))
	}
}
