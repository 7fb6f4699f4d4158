package worker

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/toolworker"
	"github.com/toolfleet/toolfleet/pkg/config"
)

// Worker serves tools on a fleet over a connection its caller owns. Make it
// with [New]; [Worker.Run] serves.
type Worker struct {
	w *toolworker.Worker
}

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
	w, err := toolworker.New(nc, toolworker.Config{
		// The domain is cfg's alone: a library reads no environment.
		Conn:                natsbus.ConnConfig{JSDomain: cfg.JSDomain, Getenv: noEnv},
		Prefix:              cfg.Prefix,
		Tools:               cfg.Tools,
		MCPServers:          cfg.MCPServers,
		LogStderr:           cfg.LogStderr,
		MaxOutputChars:      cfg.MaxOutputChars,
		Worker:              cfg.natsbus(),
		StreamCheckInterval: cfg.StreamCheckInterval,
		Metrics:             cfg.Metrics,
		Logger:              cfg.Logger,
	})
	if err != nil {
		return nil, unprefixed(err)
	}
	return &Worker{w: w}, nil
}

// Run checks the fleet's streams (creating a missing one when the server
// lets it, changing none), publishes the tools' specs to the catalog and
// serves calls until ctx ends; then it stops pulling, lets calls in flight
// finish (Config.ShutdownGrace) and returns nil. It returns an error when
// the streams differ from their expected configuration at start, or the
// worker cannot serve. Run once.
func (w *Worker) Run(ctx context.Context) error {
	err := w.w.Run(ctx)
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		return nil
	}
	return err
}

// Published is closed once Run has written every tool's spec to the
// catalog (with MCP servers: their first tool lists), so a coordinator
// sees them. It stays open if Run fails before that.
func (w *Worker) Published() <-chan struct{} { return w.w.Published() }

// Healthy reports whether the worker's connection is up: the liveness
// probe.
func (w *Worker) Healthy(ctx context.Context) error { return w.w.Healthy(ctx) }

// Ready reports whether the worker can take calls (its connection, streams
// and consumers are there, the streams as expected): the readiness probe.
func (w *Worker) Ready(ctx context.Context) error { return w.w.Ready(ctx) }

// unprefixed turns toolworker's "Worker.X" configuration errors into this
// package's "X".
func unprefixed(err error) error {
	for _, ce := range config.Errors(err) {
		f := ce.ConfigField()
		if len(f) > len("Worker.") && f[:len("Worker.")] == "Worker." {
			return config.Errorf(f[len("Worker."):], "%s", ce.ConfigProblem())
		}
		return ce
	}
	return fmt.Errorf("worker: %w", err)
}

// noEnv is an empty environment.
func noEnv(string) string { return "" }
