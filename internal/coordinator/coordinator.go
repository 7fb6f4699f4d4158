package coordinator

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/internal/approval"
	"github.com/toolfleet/toolfleet/internal/discovery"
	"github.com/toolfleet/toolfleet/internal/embedded"
	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/toolworker"
	"github.com/toolfleet/toolfleet/pkg/config"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// Coordinator holds one coordinator's connections and components. Open
// starts it; Run runs one prompt; Close stops everything it started.
type Coordinator struct {
	cfg      Config
	subjects protocol.Subjects
	log      zerolog.Logger

	server    *embedded.Server // nil with a remote server
	storeDir  string           // removed by Close when Open created it
	credsFile string           // the listening embedded server's credentials, removed by Close
	nc        *nats.Conn
	js        natsbus.JetStream
	catalog   *natsbus.Catalog
	obs       *observability           // nil without MetricsAddr
	monitor   *discovery.SchemaMonitor // reports schema conflicts
	guard     *natsbus.StreamGuard     // the fleet's streams as expected
	guardEnd  context.CancelFunc
	runner    *loop.Runner
	// disp is the runner's, closed with the coordinator (its results
	// consumer deleted).
	disp *natsbus.Dispatcher
	// fleetDisps are the dispatchers Fleet handed out, closed with the
	// coordinator too.
	fleetMu    sync.Mutex
	fleetDisps []*natsbus.Dispatcher

	workers       []inprocWorker
	workersCancel context.CancelFunc
	workersDone   sync.WaitGroup
	closeOnce     sync.Once
}

// Open validates cfg, connects to NATS (starting an embedded server when no
// URL is configured), ensures the fleet's streams, starts in-process
// workers and waits until the catalog lists every tool they serve (without
// in-process workers: until it lists a tool, or CatalogWait passes).
func Open(ctx context.Context, cfg Config) (_ *Coordinator, err error) {
	if cfg.Model == nil {
		return nil, errors.New("coordinator: no model configured")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	subjects, err := protocol.NewSubjects(cfg.Prefix)
	if err != nil {
		return nil, fmt.Errorf("coordinator: %w", err)
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
	c.js, err = natsbus.NewJetStream(c.nc, cfg.Conn.Domain())
	if err != nil {
		return nil, fmt.Errorf("coordinator: %w", err)
	}
	if err := c.startGuard(ctx); err != nil {
		return nil, err
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
	if len(c.workers) > 0 {
		if err := c.waitForWorkers(ctx); err != nil {
			return nil, err
		}
	} else {
		c.waitForCatalog(ctx)
	}
	if err := c.startMonitor(ctx); err != nil {
		return nil, err
	}

	c.disp = natsbus.NewDispatcher(c.nc, c.js, subjects, natsbus.DispatcherConfig{Logger: cfg.Logger, Guard: c.guard})
	gate := approval.NewGate(c.nc, c.js, subjects, approval.GateConfig{Logger: cfg.Logger})
	lc := c.cfg.Loop
	lc.Logger = cfg.Logger
	var catalog loop.Catalog = c.catalog
	if a := cfg.Agent; a != nil {
		lc, catalog = a.LoopConfig(lc), a.Catalog(catalog)
	}
	c.runner, err = loop.New(lc, cfg.Model, catalog, c.disp, gate)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// startGuard sets up the streams a coordinator uses — the embedded
// server's owner is its own provisioning identity and creates or updates
// them; against a remote server a coordinator creates only a missing one
// (when the server lets it) and changes none — then checks their
// configuration, refusing to start when it differs, and keeps checking
// until Close.
func (c *Coordinator) startGuard(ctx context.Context) error {
	list := natsbus.StreamsOf(natsbus.FleetStreams(c.subjects, natsbus.StreamConfig{}), natsbus.RoleCoordinator)
	if c.server != nil {
		if _, err := natsbus.ProvisionStreams(ctx, c.js, list); err != nil {
			return fmt.Errorf("coordinator: %w", err)
		}
	} else {
		natsbus.CreateMissingStreams(ctx, c.js, list, c.log)
	}
	c.guard = natsbus.NewStreamGuard(c.js, natsbus.StreamGuardConfig{
		Streams: list, Interval: c.cfg.StreamCheckInterval, Logger: c.log, Observer: c.streamsObserver(),
	})
	if err := c.guard.CheckAtStart(ctx); err != nil {
		return fmt.Errorf("coordinator: %w", err)
	}
	gctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	c.guardEnd = cancel
	go c.guard.Run(gctx)
	return nil
}

// StreamsErr is nil while the fleet's streams have their expected
// configuration, the *natsbus.DriftError of the last check otherwise.
func (c *Coordinator) StreamsErr() error { return c.guard.Err() }

func (c *Coordinator) startEmbedded() error {
	dir := c.cfg.StoreDir
	if dir == "" {
		d, err := os.MkdirTemp("", "toolfleet-nats-")
		if err != nil {
			return fmt.Errorf("coordinator: store dir: %w", err)
		}
		dir, c.storeDir = d, d
	}
	ec := embedded.Config{StoreDir: dir, Logger: c.cfg.Logger}
	if c.cfg.Listen != "" {
		host, port, err := net.SplitHostPort(c.cfg.Listen)
		if err != nil {
			return &config.FieldError{Field: "Listen", Err: err}
		}
		p, err := strconv.Atoi(port)
		if err != nil || p < 0 || p > 65535 {
			return config.Errorf("Listen", "port %q", port)
		}
		if p == 0 {
			p = -1
		}
		ec.Listen, ec.GenerateCredentials, ec.Host, ec.Port = true, true, host, p
	}
	s, err := embedded.Start(ec)
	if err != nil {
		return fmt.Errorf("coordinator: starting embedded NATS: %w", err)
	}
	c.server = s
	if !s.Listening() {
		c.log.Info().Msg("embedded NATS server started (in-process connections only)")
		return nil
	}
	path := c.cfg.CredentialsFile
	if path == "" {
		path = filepath.Join(dir, "nats.env")
	}
	user, password := s.Credentials()
	content := fmt.Sprintf("NATS_URL=%s\nNATS_USER=%s\nNATS_PASSWORD=%s\n", s.ClientURL(), user, password)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		return fmt.Errorf("coordinator: writing the embedded server's credentials: %w", err)
	}
	c.credsFile = path
	c.log.Info().Str("url", s.ClientURL()).Str("user", user).Str("credentials_file", path).
		Msg("embedded NATS server started; its credentials, drawn at start, are in the credentials file")
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
			Worker:    natsbus.WorkerConfig{Name: fmt.Sprintf("inproc-%d", i+1), Observer: c.workerObserver(), Guard: c.guard},
			Logger:    c.cfg.Logger,
		})
		if err != nil {
			return fmt.Errorf("coordinator: in-process worker: %w", err)
		}
		iw := inprocWorker{w: w, stopped: make(chan error, 1)}
		c.workers = append(c.workers, iw)
		c.workersDone.Add(1)
		go func() {
			defer c.workersDone.Done()
			err := w.Run(wctx)
			if err != nil && !errors.Is(err, context.Canceled) {
				c.log.Error().Err(err).Msg("in-process worker stopped")
			}
			iw.stopped <- err
		}()
	}
	return nil
}

// inprocWait bounds how long Open waits for in-process workers to publish
// their tools. They publish within milliseconds; the bound only ends a wait
// on a store that has stopped answering.
const inprocWait = time.Minute

// inprocWorker is an in-process toolworker and the error its Run returned.
type inprocWorker struct {
	w       *toolworker.Worker
	stopped chan error // receives Run's error once
}

// waitForWorkers returns once every in-process worker has published its
// tools and the catalog lists all of them, so the model's first request
// offers every tool they serve. Both are waited for as events, not polled.
// An in-process worker that stops before it published fails Open, and so
// does a wait longer than inprocWait (a store that does not answer).
func (c *Coordinator) waitForWorkers(ctx context.Context) error {
	ctx, cancel := context.WithTimeoutCause(ctx, inprocWait,
		fmt.Errorf("in-process workers not in the catalog after %s", inprocWait))
	defer cancel()
	var names []string
	for i, iw := range c.workers {
		select {
		case <-iw.w.Published():
		case err := <-iw.stopped:
			iw.stopped <- err // for Close's wait, which does not read it
			return fmt.Errorf("coordinator: in-process worker %d stopped before it served: %w", i+1, err)
		case <-ctx.Done():
			return fmt.Errorf("coordinator: %w", context.Cause(ctx))
		}
		for _, spec := range iw.w.Harness().Specs() {
			names = append(names, string(spec.Name))
		}
	}
	if err := c.catalog.WaitFor(ctx, names...); err != nil {
		return fmt.Errorf("coordinator: %w", err)
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
	if msgs := c.agentMessages(prompt); msgs != nil {
		return c.runner.RunMessages(ctx, msgs)
	}
	return c.runner.Run(ctx, prompt)
}

// agentMessages is a run's transcript under Config.Agent: its
// instructions, then prompt; nil without an agent or for an empty prompt
// (which the loop refuses).
func (c *Coordinator) agentMessages(prompt string) []loop.Message {
	if c.cfg.Agent == nil || strings.TrimSpace(prompt) == "" {
		return nil
	}
	return c.cfg.Agent.Messages([]loop.Message{{Role: "user", Content: prompt}})
}

// Conn returns the coordinator's NATS connection.
func (c *Coordinator) Conn() *nats.Conn { return c.nc }

// CredentialsFile returns the file holding a listening embedded server's
// URL and credentials, or "" without one.
func (c *Coordinator) CredentialsFile() string { return c.credsFile }

// ClientURL returns the embedded server's URL, or "" with a remote server
// or an embedded one that does not listen.
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
		if c.guardEnd != nil {
			c.guardEnd()
		}
		if c.workersCancel != nil {
			c.workersCancel()
			c.workersDone.Wait()
		}
		c.closeObservability()
		if c.disp != nil {
			c.disp.Close()
		}
		c.fleetMu.Lock()
		for _, d := range c.fleetDisps {
			d.Close()
		}
		c.fleetMu.Unlock()
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
		if c.credsFile != "" {
			os.Remove(c.credsFile)
		}
		if c.storeDir != "" {
			os.RemoveAll(c.storeDir)
		}
	})
	return nil
}
