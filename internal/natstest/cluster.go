package natstest

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/embedded"
)

// Cluster is an [embedded.Cluster] of a test: its nodes' stores are under
// t.TempDir(), it shuts down when the test ends, and its waits fail the
// test instead of returning errors.
type Cluster struct {
	*embedded.Cluster
	t testing.TB
}

// StartCluster starts an n-node JetStream cluster (n ≥ 1) on loopback and
// waits until its meta group has a leader.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	return StartClusterWithConfig(t, n, "")
}

// StartClusterWithConfig is [StartCluster] with nats-server configuration
// text applied to every node (accounts, authorization).
func StartClusterWithConfig(t testing.TB, n int, confText string) *Cluster {
	t.Helper()
	c, err := embedded.StartCluster(embedded.ClusterConfig{Nodes: n, StoreDir: t.TempDir(), ConfigText: confText})
	if err != nil {
		t.Fatalf("natstest: %v", err)
	}
	t.Cleanup(c.Shutdown)
	return &Cluster{Cluster: c, t: t}
}

// StartTaggedCluster starts a JetStream cluster of len(tags) nodes like
// [StartCluster], node i with nats-server's server_tags tags[i], for
// stream placement.
func StartTaggedCluster(t testing.TB, tags [][]string) *Cluster {
	t.Helper()
	c, err := embedded.StartCluster(embedded.ClusterConfig{Nodes: len(tags), StoreDir: t.TempDir(), NodeTags: tags})
	if err != nil {
		t.Fatalf("natstest: %v", err)
	}
	t.Cleanup(c.Shutdown)
	return &Cluster{Cluster: c, t: t}
}

// Restart starts killed node i again on its ports and store.
func (c *Cluster) Restart(i int) {
	c.t.Helper()
	if err := c.Cluster.Restart(i); err != nil {
		c.t.Fatalf("natstest: %v", err)
	}
}

// WaitForMetaLeader waits until a running node leads the JetStream meta
// group and every running node is current with it.
func (c *Cluster) WaitForMetaLeader(timeout time.Duration) {
	c.t.Helper()
	WaitFor(c.t, timeout, c.MetaCurrent)
}

// WaitForStreamLeader waits until a running node leads stream (in account,
// "" for the global one) and returns its index.
func (c *Cluster) WaitForStreamLeader(account, stream string, timeout time.Duration) int {
	c.t.Helper()
	leader := -1
	WaitFor(c.t, timeout, func() error {
		if leader = c.StreamLeader(account, stream); leader < 0 {
			return fmt.Errorf("no leader for stream %s", stream)
		}
		return nil
	})
	return leader
}

// ChangeLeaders changes stream's leader faults times, calling goOn(what)
// before each change, while a node it shut down is down, and after the
// last change; goOn waits for the work under test to go on. Every third
// change shuts the leader's node down and restarts it once goOn returned,
// then waits for the meta group and the stream's replicas; the others ask
// the leader to step down ([StepDownStream]). It returns how many nodes it
// shut down.
func (c *Cluster) ChangeLeaders(js jetstream.JetStream, stream string, faults int, goOn func(what string)) (kills int) {
	c.t.Helper()
	for k := 1; k <= faults; k++ {
		goOn(fmt.Sprintf("before leader change %d", k))
		leader := c.WaitForStreamLeader("", stream, time.Minute)
		if k%3 != 0 {
			StepDownStream(c.t, js, stream, time.Minute)
			continue
		}
		c.Kill(leader)
		kills++
		goOn(fmt.Sprintf("while node %d is down", leader))
		c.Restart(leader)
		c.WaitForMetaLeader(2 * time.Minute)
		WaitStreamsCurrent(c.t, js, 2*time.Minute, stream)
	}
	goOn("after the last leader change")
	return kills
}
