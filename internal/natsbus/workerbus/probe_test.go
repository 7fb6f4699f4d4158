package workerbus_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natsbus/bustest"
	"github.com/toolfleet/toolfleet/internal/natsbus/workerbus"
	"github.com/toolfleet/toolfleet/internal/natstest"
	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/harness/harnesstest"
)

// fakeClock is a settable clock.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func TestProbeReadiness(t *testing.T) {
	f := bustest.NewFleet(t)
	h := harnesstest.New(t, harness.Config{}, harness.Echo())
	nc := natstest.Connect(t, f.Srv)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	w, err := workerbus.NewWorker(nc, js, f.Subjects, h, workerbus.WorkerConfig{Name: "probed"})
	if err != nil {
		t.Fatal(err)
	}
	clock := &fakeClock{now: time.Now()}
	cfg := w.ProbeConfig()
	cfg.Now = clock.Now
	p := natsbus.NewProbe(nc, js, cfg)

	// Before the worker ran, its consumer does not exist: not ready.
	if err := p.Healthy(bustest.Ctx(t)); err != nil {
		t.Fatalf("Healthy = %v, want nil while connected", err)
	}
	err = p.Ready(bustest.Ctx(t))
	if err == nil || !strings.Contains(err.Error(), "consumer tool_echo of FLEET_CALLS: not found") {
		t.Fatalf("Ready = %v, want the missing consumer named", err)
	}

	// The answer is cached for CacheFor, then checked again.
	f.StartWorker(t, h, workerbus.WorkerConfig{Name: "other"}) // creates the shared consumer
	if err2 := p.Ready(bustest.Ctx(t)); err2 == nil || err2.Error() != err.Error() {
		t.Fatalf("Ready within CacheFor = %v, want the cached %v", err2, err)
	}
	clock.Add(natsbus.DefaultProbeCacheFor)
	if err := p.Ready(bustest.Ctx(t)); err != nil {
		t.Fatalf("Ready after CacheFor = %v, want nil", err)
	}

	// The fleet probe checks streams and the catalog bucket.
	fp := natsbus.NewProbe(f.NC, f.JS, natsbus.FleetProbeConfig(f.Subjects))
	if err := fp.Ready(bustest.Ctx(t)); err != nil {
		t.Fatalf("fleet Ready = %v, want nil", err)
	}
	missing := natsbus.NewProbe(f.NC, f.JS, natsbus.ProbeConfig{Buckets: []string{"nope"}})
	if err := missing.Ready(bustest.Ctx(t)); err == nil || !strings.Contains(err.Error(), "bucket nope: not found") {
		t.Fatalf("Ready with a missing bucket = %v", err)
	}

	// The connection is checked on every call, cache or not.
	f.Srv.Shutdown()
	natstest.WaitFor(t, 10*time.Second, func() error {
		if err := p.Ready(bustest.Ctx(t)); !errors.Is(err, natsbus.ErrNotConnected) {
			return fmt.Errorf("Ready = %v, want ErrNotConnected", err)
		}
		if err := p.Healthy(bustest.Ctx(t)); !errors.Is(err, natsbus.ErrNotConnected) {
			return fmt.Errorf("Healthy = %v, want ErrNotConnected", err)
		}
		return nil
	})
}
