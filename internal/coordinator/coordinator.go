package coordinator

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/internal/approval"
	"github.com/toolfleet/toolfleet/internal/embedded"
	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/toolworker"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// Coordinator holds one coordinator's connections and components. Open
// starts it; Run runs one prompt; Close stops everything it started.
type Coordinator struct {
	cfg      Config
	subjects protocol.Subjects
	log      zerolog.Logger

	server   *embedded.Server // nil with a remote server
	storeDir string           // removed by Close when Open created it
	nc       *nats.Conn
	js       jetstream.JetStream
	catalog  *natsbus.Catalog
	obs      *observability         // nil without MetricsAddr
	monitor  *natsbus.SchemaMonitor // reports schema conflicts
	runner   *loop.Runner

	workersCancel context.CancelFunc
	workersDone   sync.WaitGroup
	closeOnce     sync.Once
}

// Open validates cfg, connects to NATS (starting an embedded server when no
// URL is configured), ensures the fleet's streams, starts in-process
// workers and waits until the catalog lists a tool or CatalogWait passes.
func Open(ctx context.Context, cfg Config) (_ *Coordinator, err error) {
	if cfg.Model == nil {
		return nil, errors.New("coordinator: no model configured")
	}
	subjects, err := protocol.NewSubjects(cfg.Prefix)
	if err != nil {
		return nil, fmt.Errorf("coordinator: --prefix: %w", err)
	}
	useEmbedded := cfg.Conn.URL == "" && os.Getenv("NATS_URL") == ""
	cfg = cfg.withDefaults(useEmbedded)
	c := &Coordinator{cfg: cfg, subjects: subjects, log: cfg.Logger}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()

	if err := c.startMetrics(); err != nil {
		return nil, err
	}
	var opts []nats.Option
	if useEmbedded {
		if err := c.startEmbedded(); err != nil {
			return nil, err
		}
		opts = append(opts, c.server.InProcess())
	}
	conn := cfg.Conn
	if conn.Name == "" {
		conn.Name = "toolfleet-coordinator"
	}
	conn.Logger = cfg.Logger
	c.nc, err = natsbus.Connect(ctx, conn, opts...)
	if err != nil {
		return nil, fmt.Errorf("coordinator: connecting to NATS: %w", err)
	}
	c.js, err = jetstream.New(c.nc)
	if err != nil {
		return nil, fmt.Errorf("coordinator: %w", err)
	}
	if err := natsbus.EnsureStreams(ctx, c.js, subjects, natsbus.StreamConfig{}); err != nil {
		return nil, fmt.Errorf("coordinator: %w", err)
	}
	if err := c.startWorkers(ctx); err != nil {
		return nil, err
	}
	cc := natsbus.CatalogConfig{Logger: cfg.Logger}
	if c.obs != nil {
		cc.Observer = c.obs.coord
	}
	c.catalog, err = natsbus.NewCatalogWith(ctx, c.js, subjects, cc)
	if err != nil {
		return nil, fmt.Errorf("coordinator: reading the tool catalog: %w", err)
	}
	c.waitForCatalog(ctx)
	if err := c.startMonitor(ctx); err != nil {
		return nil, err
	}

	dispatcher := natsbus.NewDispatcher(c.nc, c.js, subjects, natsbus.DispatcherConfig{Logger: cfg.Logger})
	gate := approval.NewGate(c.nc, c.js, subjects, approval.GateConfig{Logger: cfg.Logger})
	lc := c.cfg.Loop
	lc.Logger = cfg.Logger
	c.runner, err = loop.New(lc, cfg.Model, c.catalog, dispatcher, gate)
	if err != nil {
		return nil, err
	}
	return c, nil
}

func (c *Coordinator) startEmbedded() error {
	dir := c.cfg.StoreDir
	if dir == "" {
		d, err := os.MkdirTemp("", "toolfleet-nats-")
		if err != nil {
			return fmt.Errorf("coordinator: store dir: %w", err)
		}
		dir, c.storeDir = d, d
	}
	s, err := embedded.Start(embedded.Config{StoreDir: dir, Logger: c.cfg.Logger})
	if err != nil {
		return fmt.Errorf("coordinator: starting embedded NATS: %w", err)
	}
	c.server = s
	c.log.Info().Str("url", s.ClientURL()).Msg("embedded NATS server started")
	return nil
}

func (c *Coordinator) startWorkers(ctx context.Context) error {
	if c.cfg.Workers == 0 {
		return nil
	}
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	c.workersCancel = cancel
	for i := range c.cfg.Workers {
		w, err := toolworker.New(c.nc, toolworker.Config{
			Prefix:    c.cfg.Prefix,
			ToolsFile: c.cfg.ToolsFile,
			Builtins:  c.cfg.Builtins,
			Name:      fmt.Sprintf("inproc-%d", i+1),
			Worker:    natsbus.WorkerConfig{Observer: c.workerObserver()},
			Logger:    c.cfg.Logger,
		})
		if err != nil {
			return fmt.Errorf("coordinator: in-process worker: %w", err)
		}
		c.workersDone.Add(1)
		go func() {
			defer c.workersDone.Done()
			if err := w.Run(wctx); err != nil && !errors.Is(err, context.Canceled) {
				c.log.Error().Err(err).Msg("in-process worker stopped")
			}
		}()
	}
	return nil
}

// waitForCatalog polls until the catalog lists a tool, so the model's first
// request offers the tools that in-process or already-running workers serve.
func (c *Coordinator) waitForCatalog(ctx context.Context) {
	deadline := time.Now().Add(c.cfg.CatalogWait)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if specs, err := c.catalog.Tools(ctx); err == nil && len(specs) > 0 {
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
	c.log.Warn().Dur("waited", c.cfg.CatalogWait).Msg("the tool catalog is empty: no worker has published a tool yet")
}

// Run runs the loop for one prompt. See loop.Runner.Run.
func (c *Coordinator) Run(ctx context.Context, prompt string) (*loop.Result, error) {
	return c.runner.Run(ctx, prompt)
}

// Conn returns the coordinator's NATS connection.
func (c *Coordinator) Conn() *nats.Conn { return c.nc }

// ClientURL returns the embedded server's URL, or "" with a remote server.
func (c *Coordinator) ClientURL() string {
	if c.server == nil {
		return ""
	}
	return c.server.ClientURL()
}

// Close stops in-process workers, closes the connection and shuts the
// embedded server down. It is idempotent.
func (c *Coordinator) Close() error {
	c.closeOnce.Do(func() {
		if c.workersCancel != nil {
			c.workersCancel()
			c.workersDone.Wait()
		}
		c.closeObservability()
		if c.catalog != nil {
			c.catalog.Close()
		}
		if c.nc != nil {
			c.nc.Drain()
			c.nc.Close()
		}
		if c.server != nil {
			c.server.Shutdown()
		}
		if c.storeDir != "" {
			os.RemoveAll(c.storeDir)
		}
	})
	return nil
}
