package coordinator

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolfleet/toolfleet/internal/discovery"
	"github.com/toolfleet/toolfleet/internal/metrics"
	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/pkg/config"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/serve"
)

// metricsCloseTimeout bounds the metrics server's shutdown.
const metricsCloseTimeout = 2 * time.Second

// errConnecting is the health of a coordinator without a connection yet.
var errConnecting = errors.New("connecting to NATS")

// observability is a coordinator's metrics, probes and schema monitor.
type observability struct {
	reg     *prometheus.Registry
	coord   *metrics.Coordinator
	worker  *metrics.Worker
	streams *metrics.Streams
	shares  *metrics.Shares
	srv     *metrics.Server
	nc      atomic.Pointer[nats.Conn]
	probe   atomic.Pointer[natsbus.Probe]
	monitor *discovery.SchemaMonitor
	// serving is the server of Serve, whose streams readiness also needs.
	serving atomic.Pointer[serve.Server]
	// catalog counts the anomalies of the coordinator's catalog, until
	// Serve's server, whose catalog sees the same entries, counts them.
	catalog catalogAnomalies
}

// catalogAnomalies passes a catalog's anomalies on to coord unless off:
// one catalog of the process counts each anomaly.
type catalogAnomalies struct {
	coord *metrics.Coordinator
	off   atomic.Bool
}

// CatalogAnomaly implements natsbus.CatalogObserver.
func (a *catalogAnomalies) CatalogAnomaly(kind string) {
	if !a.off.Load() {
		a.coord.CatalogAnomaly(kind)
	}
}

// shareObserver is what the coordinator's dispatchers tell about calls
// held for their client's share: its metrics, nil without.
func (c *Coordinator) shareObserver() natsbus.ShareObserver {
	if c.obs == nil {
		return nil
	}
	return c.obs.shares
}

// startMetrics starts the metrics server when MetricsAddr is set, before
// the connection exists (probes answer "connecting" meanwhile), and makes
// the loop report to it.
func (c *Coordinator) startMetrics() error {
	if c.cfg.MetricsAddr == "" {
		return nil
	}
	reg := metrics.NewRegistry()
	o := &observability{reg: reg, coord: metrics.NewCoordinator(reg), worker: metrics.NewWorker(reg), streams: metrics.NewStreams(reg), shares: metrics.NewShares(reg)}
	metrics.RegisterConn(reg, func() bool {
		nc := o.nc.Load()
		return nc != nil && nc.IsConnected()
	})
	srv, err := metrics.Listen(metrics.ServerConfig{
		Addr:     c.cfg.MetricsAddr,
		Gatherer: reg,
		Healthy: func(ctx context.Context) error {
			if p := o.probe.Load(); p != nil {
				return p.Healthy(ctx)
			}
			return errConnecting
		},
		Ready: func(ctx context.Context) error {
			p := o.probe.Load()
			if p == nil {
				return errConnecting
			}
			if err := p.Ready(ctx); err != nil {
				return err
			}
			if s := o.serving.Load(); s != nil {
				return s.Err()
			}
			return nil
		},
		Logger: c.cfg.Logger,
	})
	if err != nil {
		return &config.FieldError{Field: "MetricsAddr", Err: err}
	}
	o.srv = srv
	o.catalog.coord = o.coord
	c.obs = o
	c.cfg.Loop.Observer = loop.Observers(c.cfg.Loop.Observer, o.coord)
	return nil
}

// startMonitor answers probes from the fleet's streams and starts the
// schema monitor, which reports workers that disagree on a tool's schema.
func (c *Coordinator) startMonitor(ctx context.Context) error {
	mc := discovery.SchemaMonitorConfig{Logger: c.cfg.Logger}
	if c.obs != nil {
		c.obs.nc.Store(c.nc)
		c.probeGuards(c.guard)
		mc.Observer = c.obs.coord
	}
	m, err := discovery.NewSchemaMonitor(ctx, c.nc, c.js, c.subjects, mc)
	if err != nil {
		return fmt.Errorf("coordinator: %w", err)
	}
	c.monitor = m
	return nil
}

// probeGuards answers readiness from the fleet's streams and consumers and
// from guards: not ready while one finds a stream configured otherwise
// than expected.
func (c *Coordinator) probeGuards(guards ...*natsbus.StreamGuard) {
	if c.obs == nil {
		return
	}
	pc := natsbus.FleetProbeConfig(c.subjects)
	pc.Guards = guards
	c.obs.probe.Store(natsbus.NewProbe(c.nc, c.js, pc))
}

// streamsObserver is what stream guards report to: the metrics, or
// nothing.
func (c *Coordinator) streamsObserver() natsbus.StreamGuardObserver {
	if c.obs == nil {
		return nil
	}
	return c.obs.streams
}

// workerObserver is what in-process workers report to: the metrics, or
// nothing.
func (c *Coordinator) workerObserver() natsbus.WorkerObserver {
	if c.obs == nil {
		return nil
	}
	return c.obs.worker
}

// MetricsAddr returns the address the metrics server listens on, or ""
// without one.
func (c *Coordinator) MetricsAddr() string {
	if c.obs == nil {
		return ""
	}
	return c.obs.srv.Addr()
}

// SchemaConflicts returns the tools on whose schema the fleet disagreed at
// the last check (see discovery.SchemaMonitor).
func (c *Coordinator) SchemaConflicts() []discovery.SchemaConflict {
	if c.monitor == nil {
		return nil
	}
	return c.monitor.Conflicts()
}

// closeObservability stops the schema monitor and the metrics server.
func (c *Coordinator) closeObservability() {
	if c.monitor != nil {
		c.monitor.Close()
	}
	if c.obs != nil {
		ctx, cancel := context.WithTimeout(context.Background(), metricsCloseTimeout)
		defer cancel()
		c.obs.srv.Close(ctx)
	}
}
