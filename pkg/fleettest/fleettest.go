package fleettest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/internal/embedded"
	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/protocol"
	"github.com/toolfleet/toolfleet/pkg/runner"
	"github.com/toolfleet/toolfleet/pkg/worker"
)

// startWait bounds how long Start waits for the workers to publish their
// tools: milliseconds normally; the bound ends a wait on a stuck store.
const startWait = time.Minute

// Config configures a [Fleet]. The zero value starts a fleet with no
// workers: a server and its streams.
type Config struct {
	// Tools are served by each worker. Default: none (then no worker
	// starts).
	Tools []harness.Tool
	// Workers is the number of workers serving Tools, each on its own
	// connection. Default: 1 when Tools is set.
	Workers int
	// Worker is the template of every worker's configuration (its Tools,
	// Prefix and Logger are this Config's; each worker is named
	// "fleettest-<n>"). Default: the defaults.
	Worker worker.Config
	// Prefix is the fleet's subject prefix. Default: "fleet".
	Prefix string
	// Listen opens the server's TCP listener on 127.0.0.1 and a random
	// port, for programs in other processes ([Fleet.URL]). Default: false,
	// in-process connections only.
	Listen bool
	// Logger receives the workers' and runners' logs. The zero value
	// discards them.
	Logger zerolog.Logger
}

// Fleet is a running test fleet.
type Fleet struct {
	t      testing.TB
	cfg    Config
	server *embedded.Server
	nc     *nats.Conn
}

// Start starts a fleet for t, or fails t. It returns once every worker's
// tools are in the catalog; everything stops when t ends.
func Start(t testing.TB, cfg Config) *Fleet {
	t.Helper()
	if cfg.Workers < 0 {
		t.Fatalf("fleettest: Workers must be >= 0, got %d", cfg.Workers)
	}
	if cfg.Workers == 0 && len(cfg.Tools) > 0 {
		cfg.Workers = 1
	}
	subjects, err := protocol.NewSubjects(cfg.Prefix)
	if err != nil {
		t.Fatalf("fleettest: Prefix: %v", err)
	}
	ec := embedded.Config{StoreDir: t.TempDir()}
	if cfg.Listen {
		ec.Listen, ec.Host, ec.Port = true, "127.0.0.1", -1
	}
	s, err := embedded.Start(ec)
	if err != nil {
		t.Fatalf("fleettest: starting the server: %v", err)
	}
	t.Cleanup(s.Shutdown)
	f := &Fleet{t: t, cfg: cfg, server: s}
	f.nc = f.Connect()
	ctx, cancel := context.WithTimeout(context.Background(), startWait)
	defer cancel()
	js, err := natsbus.NewJetStream(f.nc, "")
	if err != nil {
		t.Fatalf("fleettest: %v", err)
	}
	if _, err := natsbus.Provision(ctx, js, subjects, natsbus.StreamConfig{}); err != nil {
		t.Fatalf("fleettest: provisioning the streams: %v", err)
	}
	for i := range cfg.Workers {
		f.startWorker(ctx, i+1)
	}
	return f
}

// startWorker starts worker n and waits until its tools are in the
// catalog.
func (f *Fleet) startWorker(ctx context.Context, n int) {
	t := f.t
	t.Helper()
	wc := f.cfg.Worker
	wc.Tools, wc.Prefix = f.cfg.Tools, f.cfg.Prefix
	if wc.Name == "" {
		wc.Name = fmt.Sprintf("fleettest-%d", n)
	}
	wc.Logger = f.cfg.Logger
	w, err := worker.New(f.Connect(), wc)
	if err != nil {
		t.Fatalf("fleettest: worker %d: %v", n, err)
	}
	wctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("fleettest: worker %d: %v", n, err)
		}
	})
	select {
	case <-w.Published():
	case err := <-done:
		done <- err
		t.Fatalf("fleettest: worker %d stopped before it served: %v", n, err)
	case <-ctx.Done():
		t.Fatalf("fleettest: worker %d did not publish its tools in %v", n, startWait)
	}
}

// Conn returns the fleet's connection for the test: in-process, closed when
// the test ends. Hand it to a client of the fleet or a runner.
func (f *Fleet) Conn() *nats.Conn { return f.nc }

// Connect opens a new connection to the fleet's server, closed when the
// test ends.
func (f *Fleet) Connect() *nats.Conn {
	f.t.Helper()
	nc, err := nats.Connect("", f.server.InProcess(), nats.Name("fleettest"), nats.MaxReconnects(-1))
	if err != nil {
		f.t.Fatalf("fleettest: connecting: %v", err)
	}
	f.t.Cleanup(nc.Close)
	return nc
}

// Prefix returns the fleet's subject prefix.
func (f *Fleet) Prefix() string {
	if f.cfg.Prefix == "" {
		return protocol.DefaultPrefix
	}
	return f.cfg.Prefix
}

// URL returns the server's client URL with Config.Listen, else "".
func (f *Fleet) URL() string {
	if !f.cfg.Listen {
		return ""
	}
	return f.server.ClientURL()
}

// Runner returns a runner over the fleet (its Prefix and Logger are the
// fleet's), closed when the test ends; it fails the
// test on an error. Only cfg.Model is required.
func (f *Fleet) Runner(cfg runner.Config) *runner.Runner {
	f.t.Helper()
	cfg.Prefix = f.cfg.Prefix
	cfg.Logger = f.cfg.Logger
	ctx, cancel := context.WithTimeout(context.Background(), startWait)
	defer cancel()
	r, err := runner.New(ctx, f.nc, cfg)
	if err != nil {
		f.t.Fatalf("fleettest: runner: %v", err)
	}
	f.t.Cleanup(func() { r.Close() })
	var names []string
	for _, tl := range f.cfg.Tools {
		names = append(names, tl.Name)
	}
	if f.cfg.Workers > 0 {
		if err := r.WaitForTools(ctx, names...); err != nil && !errors.Is(err, context.Canceled) {
			f.t.Fatalf("fleettest: the catalog does not list the tools: %v", err)
		}
	}
	return r
}
