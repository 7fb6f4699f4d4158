package natstest_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/natstest"
)

// countingJS counts the stream lookups made through it.
type countingJS struct {
	jetstream.JetStream
	lookups atomic.Int32
}

func (j *countingJS) Stream(ctx context.Context, name string) (jetstream.Stream, error) {
	j.lookups.Add(1)
	return j.JetStream.Stream(ctx, name)
}

// TestStreamInfoWaitsForALeader takes two nodes of three away from an R3
// stream, so that it has no leader, and asks for its info: StreamInfo asks
// again until a node is back and the stream answers, then returns its
// info; WaitStreamsCurrent returns once every replica is current.
func TestStreamInfoWaitsForALeader(t *testing.T) {
	c := natstest.StartCluster(t, 3)
	nc, err := nats.Connect(c.URLs(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	base, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	js := &countingJS{JetStream: base}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}, Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "s.1", []byte("x")); err != nil {
		t.Fatal(err)
	}
	// The leader goes with one other node: the one left is a follower and
	// cannot elect itself (a leader left alone would answer for a while).
	// The other follower goes first, so that no election runs while the
	// leader still has its quorum: killed first, the leader would leave
	// two nodes that elect one of them, perhaps the one left.
	leader := c.WaitForStreamLeader("", "S", time.Minute)
	gone := []int{leader, (leader + 2) % 3}
	c.Kill(gone[1])
	c.Kill(gone[0])
	// The node left may have been the leader a moment ago (leadership can
	// move before the kills) and answer until it sees it lost its quorum:
	// wait until the stream does not answer, so that StreamInfo's first
	// ask meets no leader.
	natstest.WaitFor(t, 2*time.Minute, func() error {
		actx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		if _, err := base.Stream(actx, "S"); err == nil {
			return errors.New("stream S still answers with one node of three")
		}
		return nil
	})
	js.lookups.Store(0)
	back := make(chan struct{})
	go func() {
		defer close(back)
		// Once StreamInfo has asked and asked again, a node comes back.
		deadline := time.Now().Add(2 * time.Minute)
		for js.lookups.Load() < 2 && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		if err := c.Cluster.Restart(gone[1]); err != nil {
			t.Errorf("restarting node %d: %v", gone[1], err)
		}
	}()
	info := natstest.StreamInfo(t, js, "S", 3*time.Minute)
	<-back
	if n := js.lookups.Load(); n < 2 {
		t.Fatalf("StreamInfo asked %d times, want it to ask again while the stream had no leader", n)
	}
	if info.State.Msgs != 1 {
		t.Fatalf("stream S holds %d messages, want 1", info.State.Msgs)
	}
	c.Restart(gone[0])
	natstest.WaitStreamsCurrent(t, js, 2*time.Minute, "S")
}
