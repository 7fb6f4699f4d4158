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
	// Each request gets its own bound: on a loaded machine a node's start
	// and a leader election take long, and one budget for the whole test
	// would expire in whichever step comes last.
	ctx := t.Context()
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if _, err := js.CreateStream(cctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}, Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	publish := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			natstest.WaitFor(t, time.Minute, func() error {
				pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				defer cancel()
				_, err := js.Publish(pctx, "s.x", []byte("m"), jetstream.WithMsgID(fmt.Sprint(i)))
				return err
			})
		}
	}
	publish(0, 10)
	leader := c.WaitForStreamLeader("", "S", time.Minute)
	c.Kill(leader)
	next := c.WaitForStreamLeader("", "S", time.Minute)
	if next == leader {
		t.Fatalf("stream leader is still the killed node %d", leader)
	}
	publish(10, 20)
	c.Restart(leader)
	c.WaitForMetaLeader(time.Minute)
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
	sctx, scancel := context.WithTimeout(ctx, time.Minute)
	defer scancel()
	s, err := js.Stream(sctx, "S")
	if err != nil {
		t.Fatal(err)
	}
	if n := s.CachedInfo().State.Msgs; n != 20 {
		t.Fatalf("stream holds %d messages, want 20 (no duplicates across the leader change)", n)
	}
}
