package stores_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natsbus/bustest"
	"github.com/toolfleet/toolfleet/internal/natsbus/stores"
	"github.com/toolfleet/toolfleet/internal/natstest"
	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// watchTap is a JetStream whose buckets hand out their watchers to the
// test too, so that it can end one as the server ends a watch whose
// consumer it cannot recreate (fault injection: the rest is real).
type watchTap struct {
	jetstream.JetStream
	mu       sync.Mutex
	watchers []jetstream.KeyWatcher
	tries    atomic.Int32 // bucket lookups and watches asked for
}

func (j *watchTap) KeyValue(ctx context.Context, bucket string) (jetstream.KeyValue, error) {
	j.tries.Add(1)
	kv, err := j.JetStream.KeyValue(ctx, bucket)
	if err != nil {
		return nil, err
	}
	return tappedKV{kv, j}, nil
}

func (j *watchTap) last() jetstream.KeyWatcher {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.watchers[len(j.watchers)-1]
}

type tappedKV struct {
	jetstream.KeyValue
	tap *watchTap
}

func (kv tappedKV) WatchAll(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	kv.tap.tries.Add(1)
	w, err := kv.KeyValue.WatchAll(ctx, opts...)
	if err == nil {
		kv.tap.mu.Lock()
		kv.tap.watchers = append(kv.tap.watchers, w)
		kv.tap.mu.Unlock()
	}
	return w, err
}

// publishTool writes a spec of a tool named name into the catalog.
func publishTool(t *testing.T, js jetstream.JetStream, s protocol.Subjects, name string) {
	t.Helper()
	h, err := harness.New(harness.Config{}, harness.Tool{Name: name, Parameters: bustest.EmptyObject,
		Run: func(context.Context, json.RawMessage) (string, error) { return "", nil }})
	if err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, time.Minute, func() error {
		actx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		if err := stores.PublishSpecs(actx, js, s, h.Specs(), zerolog.Nop()); err != nil {
			return fmt.Errorf("publishing the spec of %s: %w", name, err)
		}
		return nil
	})
}

// TestCatalogFollowsTheBucketAfterItsWatchEnds ends the catalog's watch
// as the server does when the watch's consumer cannot be recreated (its
// node lost, no stream leader yet), then changes the bucket: the catalog
// makes its watch again and reads the bucket in full, so it lists the tool
// added and drops the one deleted while it had no watch.
func TestCatalogFollowsTheBucketAfterItsWatchEnds(t *testing.T) {
	f := bustest.NewFleet(t)
	h, err := harness.New(harness.Config{}, harness.Echo(), harness.Calculator())
	if err != nil {
		t.Fatal(err)
	}
	if err := stores.PublishSpecs(bustest.Ctx(t), f.JS, f.Subjects, h.Specs(), zerolog.Nop()); err != nil {
		t.Fatal(err)
	}
	tap := &watchTap{JetStream: f.JS}
	cat, err := stores.NewCatalog(bustest.Ctx(t), tap, f.Subjects, f.Log.Logger())
	if err != nil {
		t.Fatalf("NewCatalog: %v", err)
	}
	defer cat.Close()
	waitTools(t, cat, "calculator,echo")

	tap.last().Stop() // the watch ends
	publishTool(t, f.JS, f.Subjects, "wc")
	kv, err := f.JS.KeyValue(bustest.Ctx(t), f.Subjects.CatalogBucket())
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(bustest.Ctx(t), "calculator"); err != nil {
		t.Fatal(err)
	}
	waitToolsWithin(t, cat, "echo,wc", time.Minute)
	wctx, cancel := context.WithTimeout(bustest.Ctx(t), 30*time.Second)
	defer cancel()
	if err := cat.WaitFor(wctx, "echo", "wc"); err != nil {
		t.Fatalf("WaitFor after the watch ended: %v", err)
	}
}

// TestCatalogFollowsTheBucketAcrossNodeLoss keeps a catalog on a 3-node
// cluster (the bucket R3) while, three times, the node its connection is
// on is killed, a tool is added and one removed while it is down, and the
// node comes back; then the leader of the bucket's stream is killed the
// same way. Each time the catalog ends up listing exactly what the bucket
// holds.
func TestCatalogFollowsTheBucketAcrossNodeLoss(t *testing.T) {
	// Not parallel: elections slow down on a starved machine.
	c := natstest.StartCluster(t, 3)
	s := protocol.Subjects{}
	admin := bustest.ConnectJS(t, c.URLs(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	provisionR3(t, admin, s)
	publishTool(t, admin, s, "t0")
	const name = "catalog-under-test"
	js := bustest.ConnectJS(t, c.URLs(), nats.Name(name), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	log := natstest.NewLogBuffer(t)
	cat, err := stores.NewCatalog(bustest.Ctx(t), js, s, log.Logger())
	if err != nil {
		t.Fatalf("NewCatalog: %v", err)
	}
	defer cat.Close()
	waitTools(t, cat, "t0")

	stream := "KV_" + s.CatalogBucket()
	for k := 1; k <= 4; k++ {
		var node int
		if k < 4 {
			node = c.NodeOf(name)
		} else {
			node = c.WaitForStreamLeader("", stream, time.Minute)
		}
		if node < 0 {
			t.Fatalf("round %d: the catalog's connection is on no node", k)
		}
		c.Kill(node)
		publishTool(t, admin, s, fmt.Sprintf("t%d", k))
		natstest.WaitFor(t, time.Minute, func() error {
			actx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			kv, err := admin.KeyValue(actx, s.CatalogBucket())
			if err != nil {
				return fmt.Errorf("round %d: catalog bucket: %w", k, err)
			}
			if err := kv.Delete(actx, fmt.Sprintf("t%d", k-1)); err != nil {
				return fmt.Errorf("round %d: deleting t%d: %w", k, k-1, err)
			}
			return nil
		})
		c.Restart(node)
		c.WaitForMetaLeader(time.Minute)
		waitToolsWithin(t, cat, fmt.Sprintf("t%d", k), 2*time.Minute)
	}
}

// waitToolsWithin is waitTools with a bound of its own: after a node loss
// the watch is made again within its consumer's heartbeat checks.
func waitToolsWithin(t *testing.T, cat *stores.Catalog, want string, timeout time.Duration) {
	t.Helper()
	natstest.WaitFor(t, timeout, func() error {
		specs, err := cat.Tools(bustest.Ctx(t))
		if err != nil {
			return err
		}
		if got := specNames(specs); got != want {
			return fmt.Errorf("the catalog lists %s, want %s", got, want)
		}
		return nil
	})
}

// TestCatalogStartsWhileTheBucketHasNoLeader starts a catalog (as a
// coordinator does at start) while two nodes of three are down, so that
// the bucket's stream has no leader: it asks again until a node is back,
// and then lists the bucket's tools, instead of failing its first request.
func TestCatalogStartsWhileTheBucketHasNoLeader(t *testing.T) {
	// Not parallel: elections slow down on a starved machine.
	c := natstest.StartCluster(t, 3)
	s := protocol.Subjects{}
	admin := bustest.ConnectJS(t, c.URLs(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	provisionR3(t, admin, s)
	publishTool(t, admin, s, "t0")
	// The bucket's leader goes with one other node: the one left is a
	// follower and cannot elect itself (a leader left alone would answer
	// for a while).
	leader := c.WaitForStreamLeader("", "KV_"+s.CatalogBucket(), time.Minute)
	gone := []int{leader, (leader + 2) % 3}
	for _, n := range gone {
		c.Kill(n)
	}
	tap := &watchTap{JetStream: bustest.ConnectJS(t, c.URLs(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))}
	back := make(chan struct{})
	go func() {
		defer close(back)
		// Once the catalog has asked (the bucket, a watch) and asked
		// again, a node comes back.
		deadline := time.Now().Add(25 * time.Second)
		for tap.tries.Load() < 3 && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		if err := c.Cluster.Restart(gone[1]); err != nil {
			t.Errorf("restarting node %d: %v", gone[1], err)
		}
	}()
	log := natstest.NewLogBuffer(t)
	cat, err := stores.NewCatalog(t.Context(), tap, s, log.Logger())
	<-back
	if err != nil {
		t.Fatalf("NewCatalog while the bucket had no leader: %v", err)
	}
	defer cat.Close()
	if n := tap.tries.Load(); n < 3 {
		t.Fatalf("the catalog asked for the bucket and its watch %d times, want it to ask again while the bucket had no leader", n)
	}
	waitToolsWithin(t, cat, "t0", time.Minute)
}

// provisionR3 provisions the fleet with three replicas, asking again while
// the new cluster does not yet count every node as a peer for placement.
func provisionR3(t *testing.T, js jetstream.JetStream, s protocol.Subjects) {
	t.Helper()
	natstest.WaitFor(t, time.Minute, func() error {
		actx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		if _, err := natsbus.Provision(actx, js, s, natsbus.StreamConfig{Replicas: 3}); err != nil {
			return fmt.Errorf("waiting for the cluster to place three replicas: %w", err)
		}
		return nil
	})
}
