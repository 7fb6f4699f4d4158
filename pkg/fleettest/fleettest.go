package fleettest

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/internal/agents"
	"github.com/toolfleet/toolfleet/internal/embedded"
	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/pkg/agent"
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
	// until the test ends: runs submitted with pkg/client on
	// [Fleet.ConnectClient] run. Default: none.
	Serve *serve.Config
	// Agents are stored in the fleet's agents bucket before the serving
	// coordinator starts, each as its first revision. Default: none.
	Agents []agent.Definition
	// Logger receives the workers', runners' and serving coordinator's
	// logs. The zero value discards them.
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
	// The accounts and roles of deploy/nats-server.conf, every password
	// drawn: the coordinator's first, the in-process user.
	ec := embedded.Config{StoreDir: t.TempDir(), Accounts: embedded.FleetAccounts(subjects, embedded.DrawPasswords)}
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
	f.putAgents(ctx, subjects)
	if cfg.Serve != nil {
		f.startServing(ctx)
	}
	return f
}

// putAgents stores Config.Agents, as the fleet's operator.
func (f *Fleet) putAgents(ctx context.Context, subjects protocol.Subjects) {
	t := f.t
	t.Helper()
	if len(f.cfg.Agents) == 0 {
		return
	}
	js, err := natsbus.NewJetStream(f.ConnectOperator(), "")
	if err != nil {
		t.Fatalf("fleettest: %v", err)
	}
	store, err := natsbus.OpenAgents(ctx, js, subjects)
	if err != nil {
		t.Fatalf("fleettest: the agents bucket: %v", err)
	}
	reg := &agents.Registry{Store: store}
	for _, d := range f.cfg.Agents {
		doc, err := d.Marshal()
		if err == nil {
			_, _, err = reg.Put(ctx, doc)
		}
		if err != nil {
			t.Fatalf("fleettest: agent %q: %v", d.Name, err)
		}
	}
}

// startServing starts the serving coordinator of Config.Serve, stopped
// (its runs handed off, for up to its ShutdownGrace) when the test ends.
func (f *Fleet) startServing(ctx context.Context) {
	t := f.t
	t.Helper()
	sc := *f.cfg.Serve
	sc.Prefix, sc.Logger, sc.ProvisionStreams = f.cfg.Prefix, f.cfg.Logger, true
	srv, err := serve.New(ctx, f.Connect(), sc)
	if err != nil {
		t.Fatalf("fleettest: serving coordinator: %v", err)
	}
	sctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(sctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("fleettest: serving coordinator: %v", err)
		}
		srv.Close()
	})
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
	w, err := worker.New(f.ConnectWorker(), wc)
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

// Conn returns the fleet's connection for the test, as the fleet's
// coordinator: in-process, closed when the test ends. Hand it to a runner,
// or to whatever the test does as the coordinator; a client of the fleet
// gets [Fleet.ConnectClient].
func (f *Fleet) Conn() *nats.Conn { return f.nc }

// Connect opens a new connection to the fleet's server as the fleet's
// coordinator (user coordinator in account FLEET, the role a runner
// needs), in-process and closed when the test ends.
func (f *Fleet) Connect() *nats.Conn {
	f.t.Helper()
	return f.connectAs(embedded.RoleCoordinator)
}

// ConnectWorker opens a new connection to the fleet's server as a worker
// (user worker in account FLEET): what the fleet's own workers use, and a
// worker the test starts itself should. In-process, closed when the test
// ends.
func (f *Fleet) ConnectWorker() *nats.Conn {
	f.t.Helper()
	return f.connectAs(embedded.RoleWorker)
}

// ConnectClient opens a new connection to the fleet's server as its
// client (user client in an account of its own, also named client, as in
// deploy/nats-server.conf): it may submit runs as client
// (pkg/client's default name on this connection) and read their results,
// and nothing else. In-process, closed when the test ends.
func (f *Fleet) ConnectClient() *nats.Conn {
	f.t.Helper()
	return f.connectAs(embedded.RoleClient)
}

// ConnectOperator opens a new connection to the fleet's server as its
// operator (user operator in account FLEET): the only role that may
// decide approvals, pause a tool or write agent definitions. In-process,
// closed when the test ends.
func (f *Fleet) ConnectOperator() *nats.Conn {
	f.t.Helper()
	return f.connectAs(embedded.RoleOperator)
}

// connectAs connects in process as user role, with its password and the
// role's own inbox prefix (_INBOX_<role>), the only inbox it may read.
func (f *Fleet) connectAs(role string) *nats.Conn {
	f.t.Helper()
	nc, err := nats.Connect("", nats.InProcessServer(f.server.NATSServer()),
		nats.UserInfo(role, f.server.Password(role)), nats.CustomInboxPrefix("_INBOX_"+role),
		nats.Name("fleettest-"+role), nats.MaxReconnects(-1))
	if err != nil {
		f.t.Fatalf("fleettest: connecting as %s: %v", role, err)
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

// URL returns, with Config.Listen, the server's client URL with the
// worker's user and password in it (nats://worker:<password>@127.0.0.1:<port>),
// for a worker in another process; else "". A program connecting with it
// is user worker and may read only its own inbox: it sets the inbox
// prefix _INBOX_worker (nats.CustomInboxPrefix), as a worker of a deployed
// fleet does.
func (f *Fleet) URL() string {
	if !f.cfg.Listen {
		return ""
	}
	u, err := url.Parse(f.server.ClientURL())
	if err != nil {
		f.t.Fatalf("fleettest: the server's URL: %v", err)
	}
	u.User = url.UserPassword(embedded.RoleWorker, f.server.Password(embedded.RoleWorker))
	return u.String()
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
