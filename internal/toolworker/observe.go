package toolworker

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolfleet/toolfleet/internal/metrics"
	"github.com/toolfleet/toolfleet/internal/natsbus"
)

// metricsCloseTimeout bounds the metrics server's shutdown.
const metricsCloseTimeout = 2 * time.Second

// errConnecting is the health of a worker that has no connection yet.
var errConnecting = errors.New("connecting to NATS")

// observability is Run's metrics server: it starts before the connection,
// so probes answer "connecting" rather than nothing while NATS is
// unreachable, and answers from the worker's probe once attached.
type observability struct {
	reg    *prometheus.Registry
	srv    *metrics.Server
	nc     atomic.Pointer[nats.Conn]
	probe  atomic.Pointer[natsbus.Probe]
	worker atomic.Pointer[Worker] // its MCP servers' metrics
}

// startObservability starts the metrics server when cfg.MetricsAddr is set
// and makes the worker report to it (wc.Observer). It returns nil
// otherwise; every method of a nil *observability does nothing.
func startObservability(cfg Config, p *prepared) (*observability, error) {
	wc := &p.worker
	if cfg.MetricsAddr == "" {
		return nil, nil
	}
	reg := metrics.NewRegistry()
	o := &observability{reg: reg}
	wc.Observer = metrics.NewWorker(reg)
	p.streamsObserver = metrics.NewStreams(reg)
	metrics.RegisterConn(reg, func() bool {
		nc := o.nc.Load()
		return nc != nil && nc.IsConnected()
	})
	metrics.RegisterMCPServers(reg, func() []metrics.MCPServer {
		w := o.worker.Load()
		if w == nil {
			return nil
		}
		var out []metrics.MCPServer
		for _, s := range w.Servers() {
			out = append(out, s)
		}
		return out
	})
	srv, err := metrics.Listen(metrics.ServerConfig{
		Addr:     cfg.MetricsAddr,
		Gatherer: reg,
		Healthy: func(ctx context.Context) error {
			if p := o.probe.Load(); p != nil {
				return p.Healthy(ctx)
			}
			return errConnecting
		},
		Ready: func(ctx context.Context) error {
			if p := o.probe.Load(); p != nil {
				return p.Ready(ctx)
			}
			return errConnecting
		},
		Logger: cfg.Logger,
	})
	if err != nil {
		return nil, configErr("MetricsAddr", err)
	}
	o.srv = srv
	return o, nil
}

// attach answers probes from w's connection, streams and consumers.
func (o *observability) attach(nc *nats.Conn, w *Worker) {
	if o == nil {
		return
	}
	o.nc.Store(nc)
	o.worker.Store(w)
	if w.mcp != nil {
		js := w.js
		w.mcp.mu.Lock()
		w.mcp.onWorker = func(nw *natsbus.Worker) { o.probe.Store(natsbus.NewProbe(nc, js, nw.ProbeConfig())) }
		w.mcp.mu.Unlock()
		return
	}
	o.probe.Store(natsbus.NewProbe(nc, w.js, w.worker.ProbeConfig()))
	metrics.RegisterExecEscapes(o.reg, w.harness.Escaped)
}

// close stops the metrics server.
func (o *observability) close() {
	if o == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), metricsCloseTimeout)
	defer cancel()
	o.srv.Close(ctx)
}
