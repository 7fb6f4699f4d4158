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

// TestLeafReachesHubJetStream: a client of a leaf node uses the hub's
// JetStream, in the hub's domain, through the leaf connection.
func TestLeafReachesHubJetStream(t *testing.T) {
	hub := natstest.StartHub(t, "hub")
	leaf := natstest.StartLeaf(t, fmt.Sprintf("127.0.0.1:%d", natstest.LeafPort(t, hub)))
	nc, err := nats.Connect(leaf.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.NewWithDomain(nc, "hub")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	natstest.WaitFor(t, 30*time.Second, func() error {
		_, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}})
		return err
	})
	if _, err := js.Publish(ctx, "s.x", []byte("m")); err != nil {
		t.Fatal(err)
	}
	hjs, err := jetstream.New(natstest.Connect(t, hub))
	if err != nil {
		t.Fatal(err)
	}
	s, err := hjs.Stream(ctx, "S")
	if err != nil {
		t.Fatalf("the hub has no stream S: %v", err)
	}
	if n := s.CachedInfo().State.Msgs; n != 1 {
		t.Fatalf("hub stream holds %d messages, want 1", n)
	}
}
