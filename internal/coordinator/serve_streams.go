package coordinator

import (
	"context"
	"fmt"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// StreamConfig is the fleet-wide stream configuration of c's runs stream
// and bucket, the defaults for the others (see natsbus.FleetStreams).
func (c ServeConfig) StreamConfig() natsbus.StreamConfig {
	c = c.withDefaults()
	return natsbus.StreamConfig{
		Replicas:           c.Replicas,
		MaxQueuedRuns:      c.MaxQueuedRuns,
		QueuedRunMaxAge:    c.QueuedRunMaxAge,
		RunResultTTL:       c.ResultTTL,
		RunResultsMaxBytes: c.ResultsMaxBytes,
		MaxRunResultBytes:  c.MaxResultBytes,
	}
}

// runsStreams are the streams a serving coordinator uses beyond those of
// every coordinator.
func runsStreams(s protocol.Subjects, c ServeConfig) []natsbus.FleetStream {
	return natsbus.StreamsOf(natsbus.FleetStreams(s, c.StreamConfig()), natsbus.RoleServe)
}

// ensureRuns makes sure the runs stream and bucket exist — the embedded
// server's owner creates or updates them, a coordinator of a remote server
// only creates a missing one — checks their configuration with guard, and
// creates or updates the runs consumer.
func (c *Coordinator) ensureRuns(ctx context.Context, cfg ServeConfig, guard *natsbus.StreamGuard) (natsbus.Consumer, *natsbus.RunResults, error) {
	list := runsStreams(c.subjects, cfg)
	if c.server != nil {
		if _, err := natsbus.ProvisionStreams(ctx, c.js, list); err != nil {
			return nil, nil, fmt.Errorf("coordinator: %w", err)
		}
	} else {
		natsbus.CreateMissingStreams(ctx, c.js, list, c.log)
	}
	if guard != nil {
		if err := guard.CheckAtStart(ctx); err != nil {
			return nil, nil, fmt.Errorf("coordinator: %w", err)
		}
	}
	results, err := natsbus.OpenRunResults(ctx, c.js, c.subjects)
	if err != nil {
		return nil, nil, fmt.Errorf("coordinator: bucket %s: %w", c.subjects.RunsBucket(), err)
	}
	cons, err := natsbus.EnsureRunsConsumer(ctx, c.js, c.subjects, natsbus.RunsConsumerConfig{AckWait: cfg.AckWait, MaxDeliver: cfg.MaxDeliver})
	if err != nil {
		return nil, nil, fmt.Errorf("coordinator: consumer %s on %s: %w", c.subjects.RunsConsumer(), c.subjects.RunsStream(), err)
	}
	return cons, results, nil
}

// JournalStreamConfig is the stream of run journals, one subject per run
// (<prefix>.journal.run.<run>) plus operators' cancel requests
// (<prefix>.journal.cancel.<run>), as natsbus.FleetStreams lists it. It
// is [natsbus.JournalStreamConfig].
var JournalStreamConfig = natsbus.JournalStreamConfig
