package worker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natsbus/stores"
	"github.com/toolfleet/toolfleet/internal/natsbus/workerbus"
	"github.com/toolfleet/toolfleet/pkg/config"
	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/mcptool"
)

// mcpState is what a worker serving MCP servers needs: its fixed tools, the
// servers, and the harness and natsbus worker of the current tool list.
type mcpState struct {
	tools   []harness.Tool
	servers []mcptool.ServerConfig
	worker  workerbus.WorkerConfig

	mu      sync.Mutex
	harness *harness.Harness
	nw      *workerbus.Worker
	started []*mcptool.Server
}

func (m *mcpState) current() (*harness.Harness, *workerbus.Worker) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.harness, m.nw
}

// servers returns the MCP servers the worker runs, once Run started them.
func (w *Worker) servers() []*mcptool.Server {
	if w.mcp == nil {
		return nil
	}
	w.mcp.mu.Lock()
	defer w.mcp.mu.Unlock()
	return slices.Clone(w.mcp.started)
}

// runMCP starts the MCP servers, serves their tools with the fixed ones and
// serves again, with a new harness, whenever a server's tool list changes:
// once no call runs (at most reloadWait later; calls still running then get
// the worker's shutdown grace). Calls published meanwhile wait in their
// consumers.
func (w *Worker) runMCP(ctx context.Context) error {
	st := w.mcp
	var servers []*mcptool.Server
	defer func() {
		for _, s := range servers {
			s.Close()
		}
	}()
	changed := make(chan struct{}, 1)
	for _, sc := range st.servers {
		s, err := mcptool.Start(ctx, sc)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return &config.FieldError{Field: "MCPServers", Err: err}
		}
		s.OnChange(func() {
			select {
			case changed <- struct{}{}:
			default:
			}
		})
		servers = append(servers, s)
	}
	st.mu.Lock()
	st.started = slices.Clone(servers)
	st.mu.Unlock()
	busy := &inflight{inner: st.worker.Observer, idle: make(chan struct{}, 1)}
	if busy.inner == nil {
		busy.inner = workerbus.NopWorkerObserver{}
	}
	st.worker.Observer = busy
	tools := func() []harness.Tool {
		out := slices.Clone(st.tools)
		for _, s := range servers {
			out = append(out, s.Tools()...)
		}
		return out
	}
	h, nw, err := w.build(tools())
	for {
		if errors.Is(err, errNoTools) {
			// A server may list its tools later (tools/list_changed):
			// keep running, serve nothing meanwhile.
			w.cfg.Logger.Warn().Strs("servers", serverNames(servers)).
				Msg("no tools to serve: the MCP servers list none; serving them once a server lists tools (toolfleet_mcp_server_tools)")
			st.mu.Lock()
			st.harness, st.nw = nil, nil
			st.mu.Unlock()
			w.markPublished() // nothing to publish
			select {
			case <-ctx.Done():
				return nil
			case <-changed:
				h, nw, err = w.build(tools())
				continue
			}
		}
		if err != nil {
			return err
		}
		if err := stores.PublishSpecs(ctx, w.js, w.subjects, h.Specs(), w.cfg.Logger); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("worker: %w", err)
		}
		w.markPublished()
		st.mu.Lock()
		st.harness, st.nw = h, nw
		st.mu.Unlock()
		w.probe.Store(natsbus.NewProbe(w.nc, w.js, nw.ProbeConfig()))
		wctx, cancel := context.WithCancel(ctx)
		errc := make(chan error, 1)
		go func(nw *workerbus.Worker) { errc <- nw.Run(wctx) }(nw)
	serving:
		for {
			select {
			case err := <-errc:
				cancel()
				return err
			case <-ctx.Done():
				cancel()
				return <-errc
			case <-changed:
				h2, nw2, err2 := w.build(tools())
				if err2 != nil && !errors.Is(err2, errNoTools) {
					// Keep serving the list that works.
					w.cfg.Logger.Error().Err(err2).Msg("the MCP servers' new tool list cannot be served: keeping the previous one")
					continue
				}
				// Re-serving stops the worker, which gives its calls only
				// the shutdown grace: wait until none runs (or reloadWait).
				busy.waitIdle(ctx, reloadWait)
				cancel()
				if err := <-errc; err != nil {
					return err
				}
				if ctx.Err() != nil {
					return nil
				}
				if err2 == nil {
					w.cfg.Logger.Info().Msg("an MCP server's tools changed: serving the new list")
				}
				h, nw, err = h2, nw2, err2
				break serving
			}
		}
	}
}

// errNoTools is build's error for an empty tool list: the MCP servers list
// none (yet).
var errNoTools = errors.New("no tools to serve (the MCP servers list none)")

// serverNames are the servers' names, for logs.
func serverNames(servers []*mcptool.Server) []string {
	out := make([]string, 0, len(servers))
	for _, s := range servers {
		out = append(out, s.Name())
	}
	return out
}

// reloadWait bounds how long a change of the MCP servers' tools waits for
// the worker to be idle before it is served (the calls still running then
// get the worker's shutdown grace).
const reloadWait = time.Minute

// inflight counts the calls running on the worker, passing every
// measurement on to inner.
type inflight struct {
	inner workerbus.WorkerObserver
	n     atomic.Int64
	idle  chan struct{} // signalled when n drops to 0
}

// Observe counts a call in flight from its start to its finish and passes
// ev on.
func (o *inflight) Observe(ev workerbus.CallEvent) {
	if ev.Kind == workerbus.CallStarted {
		o.n.Add(1)
	}
	o.inner.Observe(ev)
	if ev.Kind == workerbus.CallFinished && o.n.Add(-1) == 0 {
		select {
		case o.idle <- struct{}{}:
		default:
		}
	}
}

// waitIdle returns when no call runs, after max, or when ctx ends.
func (o *inflight) waitIdle(ctx context.Context, max time.Duration) {
	t := time.NewTimer(max)
	defer t.Stop()
	for o.n.Load() > 0 {
		select {
		case <-o.idle:
		case <-t.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

// build makes the harness and the natsbus worker of one tool list.
func (w *Worker) build(tools []harness.Tool) (*harness.Harness, *workerbus.Worker, error) {
	if len(tools) == 0 {
		return nil, nil, errNoTools
	}
	h, err := newHarness(w.cfg, tools...)
	if err != nil {
		return nil, nil, &config.FieldError{Field: "MCPServers", Err: err}
	}
	nw, err := workerbus.NewWorker(w.nc, w.js, w.subjects, h, w.mcp.worker)
	if err != nil {
		return nil, nil, asConfigError(err)
	}
	return h, nw, nil
}
