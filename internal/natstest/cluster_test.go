package natstest_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/natstest"
)

// TestClusterSurvivesLeaderLoss starts three nodes, writes to an R3 stream,
// kills the stream's leader, writes again through the survivors, restarts
// the node and checks that it caught up.
func TestClusterSurvivesLeaderLoss(t *testing.T) {
	c := natstest.StartCluster(t, 3)
	nc, err := nats.Connect(c.URLs(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}, Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	publish := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			natstest.WaitFor(t, 30*time.Second, func() error {
				_, err := js.Publish(ctx, "s.x", []byte("m"), jetstream.WithMsgID(fmt.Sprint(i)))
				return err
			})
		}
	}
	publish(0, 10)
	leader := c.WaitForStreamLeader("", "S", 30*time.Second)
	c.Kill(leader)
	next := c.WaitForStreamLeader("", "S", 30*time.Second)
	if next == leader {
		t.Fatalf("stream leader is still the killed node %d", leader)
	}
	publish(10, 20)
	c.Restart(leader)
	c.WaitForMetaLeader(30 * time.Second)
	natstest.WaitFor(t, 30*time.Second, func() error {
		n, err := c.StoredMsgs(leader, "", "S")
		if err != nil {
			return err
		}
		if n != 20 {
			return fmt.Errorf("restarted node holds %d messages, want 20", n)
		}
		return nil
	})
	s, err := js.Stream(ctx, "S")
	if err != nil {
		t.Fatal(err)
	}
	if n := s.CachedInfo().State.Msgs; n != 20 {
		t.Fatalf("stream holds %d messages, want 20 (no duplicates across the leader change)", n)
	}
}
