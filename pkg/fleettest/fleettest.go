package fleettest

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/internal/agents"
	"github.com/toolfleet/toolfleet/internal/embedded"
	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natsbus/stores"
	"github.com/toolfleet/toolfleet/pkg/agent"
	"github.com/toolfleet/toolfleet/pkg/client"
	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/protocol"
	"github.com/toolfleet/toolfleet/pkg/runner"
	"github.com/toolfleet/toolfleet/pkg/serve"
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
	// port, for a worker in another process ([Fleet.URL]). Default: false,
	// in-process connections only.
	Listen bool
	// Serve, when set, starts a serving coordinator in the fleet
	// ([serve.New] with this configuration, its Prefix and Logger the
	// fleet's, provisioning the runs stream and bucket to it), serving
	// until the fleet closes: runs submitted with pkg/client on
	// [Fleet.ConnectClient] run. Default: none.
	Serve *serve.Config
	// Agents are stored in the fleet's agents bucket before the serving
	// coordinator starts, each as its first revision. Default: none.
	Agents []agent.Definition
	// Logger receives the workers', runners' and serving coordinator's
	// logs. The zero value discards them.
	Logger zerolog.Logger
}

// Fleet is a running fleet: a server, its streams and its workers.
type Fleet struct {
	t      testing.TB // nil for a fleet from New
	cfg    Config
	server *embedded.Server
	nc     *nats.Conn

	workers []*worker.Worker
	stops   []func() error // the serving coordinator's, then each worker's: stop it and wait for it

	mu      sync.Mutex
	closers []func() // connections and runners, closed last first
	closed  bool
	client  *client.Client
	errs    []error
}

// Start starts a fleet for t, or fails t. It returns once every worker's
// tools are in the catalog; everything stops when t ends, and a worker
// that stopped with an error fails t then.
func Start(t testing.TB, cfg Config) *Fleet {
	t.Helper()
	f, err := start(t, cfg)
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.Cleanup(func() {
		if err := f.Close(); err != nil {
			t.Errorf("%v", err)
		}
	})
	return f
}

// New starts a fleet outside a test — in an Example, or in a main that
// wants a whole fleet in one process — and returns it once every worker's
// tools are in the catalog. Close stops it. Every method that fails a
// test on a fleet from [Start] panics on a fleet from New (an in-process
// connection fails only once the fleet is closed).
func New(cfg Config) (*Fleet, error) {
	return start(nil, cfg)
}

func start(t testing.TB, cfg Config) (*Fleet, error) {
	if cfg.Workers < 0 {
		return nil, fmt.Errorf("fleettest: Workers must be >= 0, got %d", cfg.Workers)
	}
	if cfg.Workers == 0 && len(cfg.Tools) > 0 {
		cfg.Workers = 1
	}
	subjects, err := protocol.NewSubjects(cfg.Prefix)
	if err != nil {
		return nil, fmt.Errorf("fleettest: Prefix: %w", err)
	}
	// The accounts and roles of deploy/nats-server.conf, every password
	// drawn: the coordinator's first, the in-process user. The store is a
	// temporary directory, removed when the server stops.
	ec := embedded.Config{Accounts: embedded.FleetAccounts(subjects, embedded.DrawPasswords)}
	if cfg.Listen {
		ec.Listen, ec.Host, ec.Port = true, "127.0.0.1", -1
	}
	s, err := embedded.Start(ec)
	if err != nil {
		return nil, fmt.Errorf("fleettest: starting the server: %w", err)
	}
	f := &Fleet{t: t, cfg: cfg, server: s}
	if f.nc, err = f.dial(embedded.RoleCoordinator); err != nil {
		f.Close()
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), startWait)
	defer cancel()
	js, err := natsbus.NewJetStream(f.nc, "")
	if err == nil {
		_, err = natsbus.Provision(ctx, js, subjects, natsbus.StreamConfig{})
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("fleettest: provisioning the streams: %w", err)
	}
	for i := range cfg.Workers {
		if err := f.startWorker(ctx, i+1); err != nil {
			f.Close()
			return nil, err
		}
	}
	if err := f.putAgents(ctx, subjects); err != nil {
		f.Close()
		return nil, err
	}
	if cfg.Serve != nil {
		if err := f.startServing(ctx); err != nil {
			f.Close()
			return nil, err
		}
	}
	return f, nil
}

// putAgents stores Config.Agents, as the fleet's operator.
func (f *Fleet) putAgents(ctx context.Context, subjects protocol.Subjects) error {
	if len(f.cfg.Agents) == 0 {
		return nil
	}
	nc, err := f.dial(embedded.RoleOperator)
	if err != nil {
		return err
	}
	js, err := natsbus.NewJetStream(nc, "")
	if err != nil {
		return fmt.Errorf("fleettest: %w", err)
	}
	store, err := stores.OpenAgents(ctx, js, subjects)
	if err != nil {
		return fmt.Errorf("fleettest: the agents bucket: %w", err)
	}
	reg := &agents.Registry{Store: store}
	for _, d := range f.cfg.Agents {
		doc, err := d.Marshal()
		if err == nil {
			_, _, err = reg.Put(ctx, doc)
		}
		if err != nil {
			return fmt.Errorf("fleettest: agent %q: %w", d.Name, err)
		}
	}
	return nil
}

// startServing starts the serving coordinator of Config.Serve, stopped
// first when the fleet closes (its runs handed off, for up to its
// ShutdownGrace).
func (f *Fleet) startServing(ctx context.Context) error {
	sc := *f.cfg.Serve
	sc.Prefix, sc.Logger, sc.ProvisionStreams = f.cfg.Prefix, f.cfg.Logger, true
	nc, err := f.dial(embedded.RoleCoordinator)
	if err != nil {
		return err
	}
	srv, err := serve.New(ctx, nc, sc)
	if err != nil {
		return fmt.Errorf("fleettest: serving coordinator: %w", err)
	}
	sctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(sctx) }()
	var once sync.Once
	var serveErr error
	f.stops = slices.Insert(f.stops, 0, func() error {
		once.Do(func() {
			stop()
			if err := <-done; err != nil {
				serveErr = fmt.Errorf("fleettest: serving coordinator: %w", err)
			}
			srv.Close()
		})
		return serveErr
	})
	return nil
}

// startWorker starts worker n and waits until its tools are in the
// catalog.
func (f *Fleet) startWorker(ctx context.Context, n int) error {
	wc := f.cfg.Worker
	wc.Tools, wc.Prefix = f.cfg.Tools, f.cfg.Prefix
	if wc.Name == "" {
		wc.Name = fmt.Sprintf("fleettest-%d", n)
	}
	wc.Logger = f.cfg.Logger
	nc, err := f.dial(embedded.RoleWorker)
	if err != nil {
		return err
	}
	w, err := worker.New(nc, wc)
	if err != nil {
		return fmt.Errorf("fleettest: worker %d: %w", n, err)
	}
	wctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	var once sync.Once
	var runErr error
	f.workers = append(f.workers, w)
	f.stops = append(f.stops, func() error {
		once.Do(func() {
			stop()
			if err := <-done; err != nil {
				runErr = fmt.Errorf("fleettest: worker %d: %w", n, err)
			}
		})
		return runErr
	})
	select {
	case <-w.Published():
		return nil
	case err := <-done:
		done <- err
		return fmt.Errorf("fleettest: worker %d stopped before it served: %w", n, err)
	case <-ctx.Done():
		return fmt.Errorf("fleettest: worker %d did not publish its tools in %v", n, startWait)
	}
}

// Close stops the fleet: its serving coordinator (its runs handed off),
// its runners, its workers (each drains what it runs), every connection it handed out, and the server, whose store is
// removed. It returns the errors the workers stopped with. It may be
// called more than once; a fleet from [Start] is closed when its test
// ends.
func (f *Fleet) Close() error {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return errors.Join(f.errs...)
	}
	f.closed = true
	closers := f.closers
	f.mu.Unlock()
	// The serving coordinator and the workers first, each draining on its
	// own connection, then the
	// runners and connections, the last registered first.
	var errs []error
	for _, stop := range f.stops {
		if err := stop(); err != nil {
			errs = append(errs, err)
		}
	}
	for _, c := range slices.Backward(closers) {
		c()
	}
	f.server.Shutdown()
	f.mu.Lock()
	f.errs = errs
	f.mu.Unlock()
	return errors.Join(errs...)
}

// fail fails the fleet's test, or panics for a fleet from New.
func (f *Fleet) fail(format string, args ...any) {
	if f.t != nil {
		f.t.Helper()
		f.t.Fatalf(format, args...)
	}
	panic(fmt.Sprintf(format, args...))
}

// onClose registers c to run when the fleet closes (at once if it has).
func (f *Fleet) onClose(c func()) {
	f.mu.Lock()
	if !f.closed {
		f.closers = append(f.closers, c)
		f.mu.Unlock()
		return
	}
	f.mu.Unlock()
	c()
}

// Workers returns the workers the fleet started (Config.Workers of them,
// in order), to probe them ([worker.Worker.Ready]) or wait for them. They
// stop when the fleet closes.
func (f *Fleet) Workers() []*worker.Worker { return slices.Clone(f.workers) }

// Client returns a [client.Client] on a connection as the fleet's client
// (user client, in an account of its own: [Fleet.ConnectClient]), named
// client and on the fleet's prefix: it submits runs and reads their
// results. The same Client every call. Watching and deciding approvals
// takes the operator's connection: client.New(fleet.ConnectOperator(),
// client.Config{Prefix: fleet.Prefix()}).
func (f *Fleet) Client() *client.Client {
	if f.t != nil {
		f.t.Helper()
	}
	f.mu.Lock()
	c := f.client
	f.mu.Unlock()
	if c != nil {
		return c
	}
	c, err := client.New(f.ConnectClient(), client.Config{Prefix: f.cfg.Prefix})
	if err != nil {
		f.fail("fleettest: client: %v", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.client == nil {
		f.client = c
	}
	return f.client
}

// Conn returns the fleet's connection for the test, as the fleet's
// coordinator: in-process, closed when the test ends. Hand it to a runner,
// or to whatever the test does as the coordinator; a client of the fleet
// gets [Fleet.ConnectClient].
func (f *Fleet) Conn() *nats.Conn { return f.nc }

// Connect opens a new connection to the fleet's server as the fleet's
// coordinator (user coordinator in account FLEET, the role a runner
// needs), in-process and closed when the fleet closes.
func (f *Fleet) Connect() *nats.Conn {
	return f.connectAs(embedded.RoleCoordinator)
}

// ConnectWorker opens a new connection to the fleet's server as a worker
// (user worker in account FLEET): what the fleet's own workers use, and a
// worker the test starts itself should. In-process, closed when the
// fleet closes.
func (f *Fleet) ConnectWorker() *nats.Conn {
	return f.connectAs(embedded.RoleWorker)
}

// ConnectClient opens a new connection to the fleet's server as its
// client (user client in an account of its own, also named client, as in
// deploy/nats-server.conf): it may submit runs as client
// (pkg/client's default name on this connection) and read their results,
// and nothing else. In-process, closed when the fleet closes.
func (f *Fleet) ConnectClient() *nats.Conn {
	return f.connectAs(embedded.RoleClient)
}

// ConnectOperator opens a new connection to the fleet's server as its
// operator (user operator in account FLEET): the only role that may
// decide approvals, pause a tool or write agent definitions. In-process,
// closed when the fleet closes.
func (f *Fleet) ConnectOperator() *nats.Conn {
	return f.connectAs(embedded.RoleOperator)
}

// ConnectViewer opens a new connection to the fleet's server as its
// viewer (user viewer in its own account, VIEWER): it reads runs,
// approvals, tools and agents with direct gets and stream and consumer
// information, and may change nothing nor create a consumer. In-process, closed when the fleet
// closes.
func (f *Fleet) ConnectViewer() *nats.Conn {
	return f.connectAs(embedded.RoleViewer)
}

// connectAs connects in process as user role, or fails the fleet's test.
func (f *Fleet) connectAs(role string) *nats.Conn {
	nc, err := f.dial(role)
	if err != nil {
		f.fail("%v", err)
	}
	return nc
}

// dial connects in process as user role, with its password and the
// role's own inbox prefix (_INBOX_<role>), the only inbox it may read; the
// connection closes when the fleet does.
func (f *Fleet) dial(role string) (*nats.Conn, error) {
	nc, err := nats.Connect("", nats.InProcessServer(f.server.NATSServer()),
		nats.UserInfo(role, f.server.Password(role)), nats.CustomInboxPrefix("_INBOX_"+role),
		nats.Name("fleettest-"+role), nats.MaxReconnects(-1))
	if err != nil {
		return nil, fmt.Errorf("fleettest: connecting as %s: %w", role, err)
	}
	f.onClose(nc.Close)
	return nc, nil
}

// Prefix returns the fleet's subject prefix.
func (f *Fleet) Prefix() string {
	if f.cfg.Prefix == "" {
		return protocol.DefaultPrefix
	}
	return f.cfg.Prefix
}

// URL returns, with Config.Listen, the server's client URL with the
// worker's user and password in it (nats://worker:<password>@127.0.0.1:<port>),
// for a worker in another process; else "". A program connecting with it
// is user worker and may read only its own inbox: it sets the inbox
// prefix _INBOX_worker (nats.CustomInboxPrefix), as a worker of a deployed
// fleet does.
func (f *Fleet) URL() string { return f.urlAs(embedded.RoleWorker) }

// CoordinatorURL returns, with Config.Listen, the server's client URL with
// the coordinator's user and password in it, for a coordinator in another
// process (a program serving runs with pkg/serve, or running them with
// pkg/runner); else "". Its inbox prefix is _INBOX_coordinator.
func (f *Fleet) CoordinatorURL() string { return f.urlAs(embedded.RoleCoordinator) }

// urlAs returns, with Config.Listen, the server's client URL with user
// role's password in it; else "".
func (f *Fleet) urlAs(role string) string {
	if !f.cfg.Listen {
		return ""
	}
	u, err := url.Parse(f.server.ClientURL())
	if err != nil {
		f.fail("fleettest: the server's URL: %v", err)
	}
	u.User = url.UserPassword(role, f.server.Password(role))
	return u.String()
}

// Password returns the password drawn at start for user role of
// deploy/nats-server.conf ("client", "operator", "viewer", "worker", ...), for a
// test that logs in as that user through another door than a Go
// connection (the HTTP API's login, with Config.Listen's address); "" for
// a user the fleet does not have.
func (f *Fleet) Password(role string) string { return f.server.Password(role) }

// Runner returns a runner over the fleet (its Prefix and Logger are the
// fleet's), closed when the fleet closes; it fails the test on an error.
// Only cfg.Model is required.
func (f *Fleet) Runner(cfg runner.Config) *runner.Runner {
	if f.t != nil {
		f.t.Helper()
	}
	cfg.Prefix = f.cfg.Prefix
	cfg.Logger = f.cfg.Logger
	ctx, cancel := context.WithTimeout(context.Background(), startWait)
	defer cancel()
	r, err := runner.New(ctx, f.nc, cfg)
	if err != nil {
		f.fail("fleettest: runner: %v", err)
	}
	f.onClose(func() { r.Close() })
	var names []string
	for _, tl := range f.cfg.Tools {
		names = append(names, tl.Name)
	}
	if f.cfg.Workers > 0 {
		if err := r.WaitForTools(ctx, names...); err != nil && !errors.Is(err, context.Canceled) {
			f.fail("fleettest: the catalog does not list the tools: %v", err)
		}
	}
	return r
}
