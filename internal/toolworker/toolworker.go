package toolworker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolfleet/toolfleet/internal/metrics"
	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/pkg/config"
	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/mcptool"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// flushTimeout bounds the flush of the last acks at shutdown.
const flushTimeout = 2 * time.Second

// Worker is a toolworker on a connection its caller owns.
type Worker struct {
	cfg      Config
	nc       *nats.Conn
	js       natsbus.JetStream
	subjects protocol.Subjects
	harness  *harness.Harness
	worker   *natsbus.Worker
	// mcp is set when the manifest lists MCP servers (see mcp.go).
	mcp *mcpState

	published     chan struct{} // closed once every spec is in the catalog
	publishedOnce sync.Once
	// guard checks the streams; ownGuard when this worker created it
	// (an in-process worker may share its coordinator's).
	guard    *natsbus.StreamGuard
	ownGuard bool
	// probe answers Healthy and Ready: of the current natsbus worker.
	probe atomic.Pointer[natsbus.Probe]
}

// errNotServing is the health of a worker whose MCP servers have not
// listed their tools yet.
var errNotServing = errors.New("not serving yet")

// Healthy reports whether the worker's connection is up (see
// natsbus.Probe.Healthy).
func (w *Worker) Healthy(ctx context.Context) error {
	if p := w.probe.Load(); p != nil {
		return p.Healthy(ctx)
	}
	return errNotServing
}

// Ready reports whether the worker can take calls: its connection, streams
// and consumers are there and the streams are as expected (see
// natsbus.Probe.Ready).
func (w *Worker) Ready(ctx context.Context) error {
	if p := w.probe.Load(); p != nil {
		return p.Ready(ctx)
	}
	return errNotServing
}

// New validates cfg, builds the harness and the worker. It does no I/O
// beyond reading the manifest: Run does the rest. Configuration errors are
// [config.Error]s.
func New(nc *nats.Conn, cfg Config) (*Worker, error) {
	p, err := prepare(cfg)
	if err != nil {
		return nil, err
	}
	return p.attach(nc)
}

// prepared is a validated configuration with its harness, before a
// connection exists.
type prepared struct {
	cfg      Config
	subjects protocol.Subjects
	harness  *harness.Harness
	worker   natsbus.WorkerConfig
	// tools and servers are set when the manifest lists MCP servers: the
	// harness is then built by Run, once the servers list their tools.
	tools   []harness.Tool
	servers []mcptool.ServerConfig
	// streamsObserver receives the stream checks, for metrics.
	streamsObserver natsbus.StreamGuardObserver
}

func prepare(cfg Config) (*prepared, error) {
	subjects, err := protocol.NewSubjects(cfg.Prefix)
	if err != nil {
		return nil, configErr("Prefix", err)
	}
	tools := slices.Clone(cfg.Tools)
	var servers []mcptool.ServerConfig
	for _, sc := range cfg.MCPServers {
		sc.Logger, sc.LogStderr = cfg.Logger, cfg.LogStderr
		servers = append(servers, sc)
	}
	if cfg.ToolsFile != "" {
		t, err := harness.LoadManifest(cfg.ToolsFile)
		if err != nil {
			return nil, configErr("ToolsFile", err)
		}
		tools = append(tools, t...)
		more, err := loadMCPServers(cfg)
		if err != nil {
			return nil, configErr("ToolsFile", err)
		}
		servers = append(servers, more...)
	}
	if len(cfg.Builtins) > 0 {
		t, err := harness.Builtins(cfg.Builtins)
		if err != nil {
			return nil, configErr("Builtins", err)
		}
		tools = append(tools, t...)
	}
	if len(tools) == 0 && len(servers) == 0 {
		return nil, configErr("Builtins", errors.New("no tools to serve"))
	}
	h, err := newHarness(cfg, tools...)
	if err != nil {
		return nil, configErr("Builtins", err)
	}
	wc := cfg.Worker
	wc.Logger = cfg.Logger
	if err := wc.Validate(); err != nil {
		return nil, asConfigError("Worker", err)
	}
	if err := cfg.Streams.Validate(); err != nil {
		return nil, asConfigError("Streams", err)
	}
	p := &prepared{cfg: cfg, subjects: subjects, harness: h, worker: wc, tools: tools, servers: servers}
	if cfg.Metrics != nil && cfg.MetricsAddr == "" {
		p.worker.Observer = metrics.NewWorker(cfg.Metrics)
		p.streamsObserver = metrics.NewStreams(cfg.Metrics)
	}
	return p, nil
}

// newHarness builds the harness of tools with the worker's settings.
func newHarness(cfg Config, tools ...harness.Tool) (*harness.Harness, error) {
	return harness.New(harness.Config{
		MaxOutputChars: cfg.MaxOutputChars,
		LogStderr:      cfg.LogStderr,
		Logger:         cfg.Logger,
	}, tools...)
}

func (p *prepared) attach(nc *nats.Conn) (*Worker, error) {
	js, err := natsbus.NewJetStream(nc, p.cfg.Conn.Domain())
	if err != nil {
		return nil, fmt.Errorf("toolworker: %w", err)
	}
	wc, own := p.worker, false
	if wc.Guard == nil {
		wc.Guard = natsbus.NewWorkerGuard(js, p.subjects, p.cfg.Streams, natsbus.StreamGuardConfig{
			Interval: p.cfg.StreamCheckInterval,
			Logger:   p.cfg.Logger,
			Observer: p.streamsObserver,
		})
		own = true
	}
	w := &Worker{cfg: p.cfg, nc: nc, js: js, subjects: p.subjects, harness: p.harness,
		guard: wc.Guard, ownGuard: own, published: make(chan struct{})}
	if reg := p.cfg.Metrics; reg != nil && p.cfg.MetricsAddr == "" {
		metrics.RegisterMCPServers(reg, func() []metrics.MCPServer {
			var out []metrics.MCPServer
			for _, s := range w.Servers() {
				out = append(out, s)
			}
			return out
		})
		if len(p.servers) == 0 {
			metrics.RegisterExecEscapes(reg, p.harness.Escaped)
		}
	}
	if len(p.servers) > 0 {
		w.mcp = &mcpState{tools: p.tools, servers: p.servers, worker: wc}
		return w, nil
	}
	if w.worker, err = natsbus.NewWorker(nc, js, p.subjects, p.harness, wc); err != nil {
		return nil, asConfigError("Worker", err)
	}
	w.probe.Store(natsbus.NewProbe(nc, js, w.worker.ProbeConfig()))
	return w, nil
}

// Published is closed once Run has written every tool's spec into the
// catalog bucket (with MCP servers: their first tool list). It stays open if
// Run fails before that; callers that wait on it also wait for Run to return.
func (w *Worker) Published() <-chan struct{} { return w.published }

func (w *Worker) markPublished() { w.publishedOnce.Do(func() { close(w.published) }) }

// Harness returns the worker's harness (with MCP servers: the current one).
func (w *Worker) Harness() *harness.Harness {
	if w.mcp != nil {
		h, _ := w.mcp.current()
		return h
	}
	return w.harness
}

// Run checks the fleet's streams (creating a missing one when the server
// lets it, changing none), publishes the tools' specs to the catalog and
// serves calls until ctx ends, then shuts down gracefully (see
// natsbus.Worker.Run). It refuses to start when a stream differs from its
// expected configuration (a *natsbus.DriftError), and takes no calls while
// a later check finds one that does. A ctx that ends before it serves
// ends Run with nil.
func (w *Worker) Run(ctx context.Context) error {
	if w.ownGuard {
		if err := w.guard.Setup(ctx, false); err != nil {
			return fmt.Errorf("toolworker: %w", err)
		}
		if err := w.guard.CheckAtStart(ctx); err != nil {
			if ctx.Err() != nil {
				return nil // stopped before it served: nothing failed
			}
			return fmt.Errorf("toolworker: %w", err)
		}
		gctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go w.guard.Run(gctx)
	}
	if w.mcp != nil {
		return w.runMCP(ctx)
	}
	if err := natsbus.PublishSpecs(ctx, w.js, w.subjects, w.harness.Specs(), w.cfg.Logger); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("toolworker: %w", err)
	}
	w.markPublished()
	return w.worker.Run(ctx)
}

// Run validates cfg, connects to NATS, runs a worker until ctx ends and
// closes the connection. Configuration errors are [config.Error]s and are
// reported before any connection attempt.
func Run(ctx context.Context, cfg Config) error {
	p, err := prepare(cfg)
	if err != nil {
		return err
	}
	obs, err := startObservability(cfg, p)
	if err != nil {
		return err
	}
	defer obs.close()
	conn := cfg.Conn
	if conn.Name == "" {
		conn.Name = "toolfleet-toolworker"
		if p.worker.Name != "" {
			conn.Name += "-" + p.worker.Name
		}
	}
	conn.Logger = cfg.Logger
	nc, err := natsbus.Connect(ctx, conn)
	if err != nil {
		if ce := asConfigError("Conn", err); ce != err {
			return ce
		}
		return fmt.Errorf("toolworker: %w", err)
	}
	defer nc.Close()
	w, err := p.attach(nc)
	if err != nil {
		return err
	}
	obs.attach(nc, w)
	err = w.Run(ctx)
	// Acks are buffered core publishes: send them before closing, but do
	// not hold the shutdown for a server that cannot be reached (Flush
	// alone waits 10s for it).
	if nc.IsConnected() {
		nc.FlushTimeout(flushTimeout)
	}
	return err
}

// asConfigError turns a natsbus configuration error of the configuration
// at field path prefix into a [config.Error] naming the [Config] field;
// other errors are returned as they are.
func asConfigError(prefix string, err error) error {
	var ne *natsbus.ConfigError
	if !errors.As(err, &ne) {
		return err
	}
	return config.Prefix(prefix, ne)
}
