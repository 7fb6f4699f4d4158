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

	"github.com/toolfleet/toolfleet/internal/discovery"
	"github.com/toolfleet/toolfleet/internal/embedded"
	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/procsec"
	"github.com/toolfleet/toolfleet/internal/toolworker"
	"github.com/toolfleet/toolfleet/pkg/config"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
	"github.com/toolfleet/toolfleet/pkg/runner"
	"github.com/toolfleet/toolfleet/pkg/worker"
)

// Coordinator holds one coordinator's connections and components. Open
// starts it; Run runs one prompt; Close stops everything it started.
type Coordinator struct {
	cfg      Config
	subjects protocol.Subjects
	log      zerolog.Logger

	server    *embedded.Server // nil with a remote server
	storeDir  string           // removed by Close when Open created it
	credsFile string           // the listening embedded server's client credentials
	// credsFiles are the credentials files written, removed by Close.
	credsFiles []string
	nc         *nats.Conn
	js         natsbus.JetStream
	obs        *observability           // nil without MetricsAddr
	monitor    *discovery.SchemaMonitor // reports schema conflicts
	// runner is the coordinator's loop and what it runs on — the fleet's
	// streams checked, the catalog, the dispatcher and the approval gate
	// (pkg/runner, as any Go program would have them); closed with the
	// coordinator.
	runner *runner.Runner

	workers       []inprocWorker
	workersCancel context.CancelFunc
	workersDone   sync.WaitGroup
	closeOnce     sync.Once
}

// Open validates cfg, connects to NATS (starting an embedded server when no
// URL is configured), starts the runner (pkg/runner: it ensures the
// fleet's streams, provisioning them on the embedded server, and reads the
// catalog), starts in-process workers and waits until the catalog lists
// every tool they serve (without in-process workers: until it lists a
// tool, or CatalogWait passes).
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
	if useEmbedded && conn.InboxPrefix == "" {
		// its user's inbox: remote workers answer discovery there only
		conn.InboxPrefix = "_INBOX_" + embedded.RoleCoordinator
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
	rc := runner.Config{
		Model:               cfg.Model,
		Loop:                cfg.Loop,
		Agent:               cfg.Agent,
		Prefix:              cfg.Prefix,
		JSDomain:            cfg.Conn.Domain(),
		StreamCheckInterval: cfg.StreamCheckInterval,
		// the embedded server's owner is its own provisioning identity
		ProvisionStreams: c.server != nil,
		Owner:            owner(),
		Logger:           cfg.Logger,
	}
	if c.obs != nil {
		rc.Registerer = c.obs.reg
	}
	if c.runner, err = runner.New(ctx, c.nc, rc); err != nil {
		return nil, err
	}
	if err := c.startWorkers(ctx); err != nil {
		return nil, err
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
		ec.Listen, ec.Host, ec.Port = true, host, p
		ec.Accounts = embedded.FleetAccounts(c.subjects, c.rolePassword)
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
	written := map[string]string{}
	for _, f := range []struct{ role, path string }{
		{embedded.RoleClient, path},
		{embedded.RoleWorker, filepath.Join(filepath.Dir(path), "worker.env")},
	} {
		if c.rolePassword(f.role) != "" {
			continue // the operator chose it, and knows it
		}
		content := fmt.Sprintf("NATS_URL=%s\nNATS_USER=%s\nNATS_PASSWORD=%s\nNATS_INBOX_PREFIX=_INBOX_%s\n",
			s.ClientURL(), f.role, s.Password(f.role), f.role)
		if err := os.WriteFile(f.path, []byte(content), 0o600); err != nil {
			return fmt.Errorf("coordinator: writing the embedded server's %s credentials: %w", f.role, err)
		}
		c.credsFiles = append(c.credsFiles, f.path)
		written[f.role] = f.path
	}
	c.credsFile = written[embedded.RoleClient]
	ev := c.log.Info().Str("url", s.ClientURL()).Str("credentials_file", written[embedded.RoleClient]).
		Str("worker_credentials_file", written[embedded.RoleWorker])
	if s.Password(embedded.RoleOperator) == "" {
		ev = ev.Str("approvals", "off: set "+roleEnv(embedded.RoleOperator)+" to approve calls as user "+embedded.RoleOperator)
	}
	ev.Msg("embedded NATS server started; users coordinator (in process only), worker, client and operator (with " +
		roleEnv(embedded.RoleOperator) + "); drawn passwords are in the credentials files, which carry no approving credential")
	return nil
}

// roleEnv is the environment variable that sets a role's password on a
// listening embedded server: the names of deploy/nats-server.conf.
func roleEnv(role string) string { return "TOOLFLEET_" + strings.ToUpper(role) + "_PASSWORD" }

// rolePassword is the password the operator chose for a role of the
// listening embedded server (roleEnv, read through Conn.Getenv, so a
// password procsec took out of the environment is still found), "" to
// draw one. The coordinator's own is always drawn: it never leaves the
// process.
func (c *Coordinator) rolePassword(role string) string {
	if role == embedded.RoleCoordinator {
		return ""
	}
	getenv := c.cfg.Conn.Getenv
	if getenv == nil {
		getenv = procsec.Getenv
	}
	return getenv(roleEnv(role))
}

func (c *Coordinator) startWorkers(ctx context.Context) error {
	if c.cfg.Workers == 0 {
		return nil
	}
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	c.workersCancel = cancel
	for i := range c.cfg.Workers {
		wc, err := toolworker.Load(worker.Config{
			Prefix:  c.cfg.Prefix,
			Name:    fmt.Sprintf("inproc-%d", i+1),
			Metrics: c.workerMetrics(),
			Logger:  c.cfg.Logger,
		}, c.cfg.ToolsFile, c.cfg.Builtins, nil)
		if err != nil {
			return err
		}
		w, err := worker.New(c.nc, wc)
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

// inprocWorker is an in-process worker and the error its Run returned.
type inprocWorker struct {
	w       *worker.Worker
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
		// none when its MCP servers list no tools yet
		for _, spec := range iw.w.Tools() {
			names = append(names, string(spec.Name))
		}
	}
	if err := c.runner.WaitForTools(ctx, names...); err != nil {
		return fmt.Errorf("coordinator: %w", err)
	}
	return nil
}

// waitForCatalog polls until the catalog lists a tool, so the model's first
// request offers the tools that in-process or already-running workers serve.
func (c *Coordinator) waitForCatalog(ctx context.Context) {
	deadline := time.Now().Add(c.cfg.CatalogWait)
	catalog := c.runner.Fleet().Catalog
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if specs, err := catalog.Tools(ctx); err == nil && len(specs) > 0 {
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
		if c.workersCancel != nil {
			c.workersCancel()
			c.workersDone.Wait()
		}
		c.closeObservability()
		if c.runner != nil {
			c.runner.Close()
		}
		if c.nc != nil {
			c.nc.Drain()
			c.nc.Close()
		}
		if c.server != nil {
			c.server.Shutdown()
		}
		for _, f := range c.credsFiles {
			os.Remove(f)
		}
		if c.storeDir != "" {
			os.RemoveAll(c.storeDir)
		}
	})
	return nil
}
