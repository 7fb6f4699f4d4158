package worker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go"

	"github.com/toolfleet/toolfleet/internal/metrics"
	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natsbus/stores"
	"github.com/toolfleet/toolfleet/internal/natsbus/workerbus"
	"github.com/toolfleet/toolfleet/pkg/config"
	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/mcptool"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// Worker serves tools on a fleet over a connection its caller owns. Make it
// with [New]; [Worker.Run] serves.
type Worker struct {
	cfg      Config
	nc       *nats.Conn
	js       natsbus.JetStream
	subjects protocol.Subjects
	harness  *harness.Harness
	worker   *workerbus.Worker
	// mcp is set when the worker serves MCP servers (see mcp.go).
	mcp *mcpState
	// guard checks the fleet's streams.
	guard *natsbus.StreamGuard

	published     chan struct{} // closed once every spec is in the catalog
	publishedOnce sync.Once
	// probe answers Healthy and Ready: of the current natsbus worker.
	probe atomic.Pointer[natsbus.Probe]
}

// errNotServing is the health of a worker whose MCP servers have not
// listed their tools yet.
var errNotServing = errors.New("not serving yet")

// New validates cfg and returns a worker serving its tools on nc. It does
// no I/O: [Worker.Run] does. A nil nc and a bad cfg are [config.Error]s
// (the nil connection's field is "Conn"), returned before anything connects.
func New(nc *nats.Conn, cfg Config) (*Worker, error) {
	if nc == nil {
		return nil, config.Errorf("Conn", "a connection is required, got nil")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	subjects, _ := protocol.NewSubjects(cfg.Prefix)
	js, err := natsbus.NewJetStream(nc, cfg.JSDomain)
	if err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	wc := cfg.transport()
	gc := natsbus.StreamGuardConfig{Interval: cfg.StreamCheckInterval, Logger: cfg.Logger}
	if cfg.Metrics != nil {
		wc.Observer = metrics.NewWorker(cfg.Metrics)
		gc.Observer = metrics.NewStreams(cfg.Metrics)
	}
	w := &Worker{cfg: cfg, nc: nc, js: js, subjects: subjects, published: make(chan struct{}),
		guard: natsbus.NewWorkerGuard(js, subjects, natsbus.StreamConfig{}, gc)}
	// no call is taken, and the worker is not ready, while a stream differs
	wc.Guard = w.guard
	var servers []mcptool.ServerConfig
	for _, sc := range cfg.MCPServers {
		sc.Logger, sc.LogStderr = cfg.Logger, cfg.LogStderr
		servers = append(servers, sc)
	}
	if len(servers) > 0 {
		// The harness is built by Run, once the servers list their tools.
		w.mcp = &mcpState{tools: slices.Clone(cfg.Tools), servers: servers, worker: wc}
	} else {
		if w.harness, err = newHarness(cfg, cfg.Tools...); err != nil {
			return nil, &config.FieldError{Field: "Tools", Err: err}
		}
		if w.worker, err = workerbus.NewWorker(nc, js, subjects, w.harness, wc); err != nil {
			return nil, asConfigError(err)
		}
		w.probe.Store(natsbus.NewProbe(nc, js, w.worker.ProbeConfig()))
	}
	if reg := cfg.Metrics; reg != nil {
		metrics.RegisterMCPServers(reg, func() []metrics.MCPServer {
			var out []metrics.MCPServer
			for _, s := range w.servers() {
				out = append(out, s)
			}
			return out
		})
		if w.harness != nil {
			metrics.RegisterExecEscapes(reg, w.harness.Escaped)
		}
	}
	return w, nil
}

// newHarness builds the harness of tools with the worker's settings.
func newHarness(cfg Config, tools ...harness.Tool) (*harness.Harness, error) {
	return harness.New(harness.Config{
		MaxOutputChars: cfg.MaxOutputChars,
		LogStderr:      cfg.LogStderr,
		Logger:         cfg.Logger,
	}, tools...)
}

// Run checks the fleet's streams (creating a missing one when the server
// lets it, changing none), publishes the tools' specs to the catalog and
// serves calls until ctx ends; then it stops pulling, lets calls in flight
// finish (Config.ShutdownGrace) and returns nil. It returns an error when
// the streams differ from their expected configuration at start, or the
// worker cannot serve; it takes no calls while a later check finds a
// stream that differs. Run once.
func (w *Worker) Run(ctx context.Context) error {
	err := w.run(ctx)
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		return nil
	}
	return err
}

func (w *Worker) run(ctx context.Context) error {
	if err := w.guard.Setup(ctx, false); err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	if err := w.guard.CheckAtStart(ctx); err != nil {
		if ctx.Err() != nil {
			return nil // stopped before it served: nothing failed
		}
		return fmt.Errorf("worker: %w", err)
	}
	gctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go w.guard.Run(gctx)
	if w.mcp != nil {
		return w.runMCP(ctx)
	}
	if err := stores.PublishSpecs(ctx, w.js, w.subjects, w.harness.Specs(), w.cfg.Logger); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("worker: %w", err)
	}
	w.markPublished()
	return w.worker.Run(ctx)
}

// Published is closed once Run has written every tool's spec to the
// catalog (with MCP servers: their first tool lists), so a coordinator
// sees them. It stays open if Run fails before that.
func (w *Worker) Published() <-chan struct{} { return w.published }

func (w *Worker) markPublished() { w.publishedOnce.Do(func() { close(w.published) }) }

// Tools returns the specs of the tools the worker serves now: with MCP
// servers, those of their current lists (none before Run has them).
func (w *Worker) Tools() []protocol.ToolSpec {
	h := w.harness
	if w.mcp != nil {
		h, _ = w.mcp.current()
	}
	if h == nil {
		return nil
	}
	return h.Specs()
}

// Healthy reports whether the worker's connection is up: the liveness
// probe.
func (w *Worker) Healthy(ctx context.Context) error {
	if p := w.probe.Load(); p != nil {
		return p.Healthy(ctx)
	}
	return errNotServing
}

// Ready reports whether the worker can take calls (its connection, streams
// and consumers are there, the streams as expected): the readiness probe.
func (w *Worker) Ready(ctx context.Context) error {
	if p := w.probe.Load(); p != nil {
		return p.Ready(ctx)
	}
	return errNotServing
}

// asConfigError turns a natsbus configuration error into a [config.Error]
// naming the [Config] field; other errors are returned as they are.
func asConfigError(err error) error {
	var ne *natsbus.ConfigError
	if !errors.As(err, &ne) {
		return fmt.Errorf("worker: %w", err)
	}
	return ne
}
