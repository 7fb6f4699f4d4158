package serve

import (
	"context"
	"fmt"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natsbus/stores"
)

// streamConfig is the fleet-wide stream configuration of c's runs stream
// and bucket, the defaults for the others (see natsbus.FleetStreams).
func streamConfig(c Config) natsbus.StreamConfig {
	c = c.withDefaults()
	return natsbus.StreamConfig{
		Replicas:               c.Replicas,
		MaxQueuedRuns:          c.MaxQueuedRuns,
		MaxQueuedRunsPerClient: c.MaxQueuedRunsPerClient,
		QueuedRunMaxAge:        c.QueuedRunMaxAge,
		RunResultTTL:           c.ResultTTL,
		RunResultsMaxBytes:     c.ResultsMaxBytes,
		MaxRunResultBytes:      c.MaxResultBytes,
	}
}

// ensureRuns makes sure the runs stream and bucket exist — with
// ProvisionStreams it creates or updates them, else it only creates a
// missing one (StreamGuard.Setup of s.guard) — checks their configuration
// when check is set, and creates or updates the runs consumer.
func (s *Server) ensureRuns(ctx context.Context, check bool) (natsbus.Consumer, *stores.RunResults, error) {
	cfg := s.cfg
	if err := s.guard.Setup(ctx, cfg.ProvisionStreams); err != nil {
		return nil, nil, fmt.Errorf("coordinator: %w", err)
	}
	if check {
		if err := s.guard.CheckAtStart(ctx); err != nil {
			return nil, nil, fmt.Errorf("coordinator: %w", err)
		}
	}
	results, err := stores.OpenRunResults(ctx, s.js, s.subjects)
	if err != nil {
		return nil, nil, fmt.Errorf("coordinator: bucket %s: %w", s.subjects.RunsBucket(), err)
	}
	cons, err := stores.EnsureRunsConsumer(ctx, s.js, s.subjects, stores.RunsConsumerConfig{AckWait: cfg.AckWait, MaxDeliver: cfg.MaxDeliver})
	if err != nil {
		return nil, nil, fmt.Errorf("coordinator: consumer %s on %s: %w", s.subjects.RunsConsumer(), s.subjects.RunsStream(), err)
	}
	return cons, results, nil
}
