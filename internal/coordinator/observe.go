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
)

// metricsCloseTimeout bounds the metrics server's shutdown.
const metricsCloseTimeout = 2 * time.Second

// errConnecting is the health of a coordinator without a connection yet.
var errConnecting = errors.New("connecting to NATS")

// observability is a coordinator's metrics, probes and schema monitor.
type observability struct {
	reg   *prometheus.Registry
	coord *metrics.Coordinator
	srv   *metrics.Server
	nc    atomic.Pointer[nats.Conn]
	probe atomic.Pointer[natsbus.Probe]
	// streams answers whether the fleet's streams are as expected: the
	// runner's guard, then (once Serve runs) the server's.
	streams atomic.Pointer[func() error]
}

// startMetrics starts the metrics server when MetricsAddr is set, before
// the connection exists (probes answer "connecting" meanwhile); the
// runner and Serve's server register their metrics with its registry.
func (c *Coordinator) startMetrics() error {
	if c.cfg.MetricsAddr == "" {
		return nil
	}
	reg := metrics.NewRegistry()
	o := &observability{reg: reg, coord: metrics.NewCoordinator(reg)}
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
			if streams := o.streams.Load(); streams != nil {
				return (*streams)()
			}
			return nil
		},
		Logger: c.cfg.Logger,
	})
	if err != nil {
		return &config.FieldError{Field: "MetricsAddr", Err: err}
	}
	o.srv = srv
	c.obs = o
	return nil
}

// startMonitor answers probes from the fleet's streams and starts the
// schema monitor, which reports workers that disagree on a tool's schema.
func (c *Coordinator) startMonitor(ctx context.Context) error {
	mc := discovery.SchemaMonitorConfig{Logger: c.cfg.Logger}
	if c.obs != nil {
		c.obs.nc.Store(c.nc)
		c.obs.probe.Store(natsbus.NewProbe(c.nc, c.js, natsbus.FleetProbeConfig(c.subjects)))
		c.answerStreams(c.runner.StreamsErr)
		mc.Observer = c.obs.coord
	}
	m, err := discovery.NewSchemaMonitor(ctx, c.nc, c.js, c.subjects, mc)
	if err != nil {
		return fmt.Errorf("coordinator: %w", err)
	}
	c.monitor = m
	return nil
}

// answerStreams makes readiness fail while streamsErr does: the fleet's
// streams differ from their expected configuration.
func (c *Coordinator) answerStreams(streamsErr func() error) {
	if c.obs != nil {
		c.obs.streams.Store(&streamsErr)
	}
}

// workerMetrics is the registry in-process workers register their
// metrics with: the coordinator's, nil without one. They share its
// collectors; the collectors of one worker only (its MCP servers, its
// exec tools' escapes) stay those of the first.
func (c *Coordinator) workerMetrics() prometheus.Registerer {
	if c.obs == nil {
		return nil
	}
	return firstRegisters{c.obs.reg}
}

// firstRegisters is a registry on which a collector that is already
// registered stays, instead of panicking MustRegister: Register still
// returns the AlreadyRegisteredError, by which a component shares the
// collector registered first.
type firstRegisters struct{ prometheus.Registerer }

// MustRegister registers each collector that is not registered yet.
func (r firstRegisters) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		var are prometheus.AlreadyRegisteredError
		if err := r.Register(c); err != nil && !errors.As(err, &are) {
			panic(err)
		}
	}
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
