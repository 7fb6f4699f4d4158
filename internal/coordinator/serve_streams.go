package coordinator

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

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

// runsConsumerConfig is the durable pull consumer every serving
// coordinator shares.
func runsConsumerConfig(s protocol.Subjects, c ServeConfig) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       s.RunsConsumer(),
		Description:   "toolfleet coordinators serving runs",
		FilterSubject: s.RunQueues(),
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       c.AckWait,
		MaxDeliver:    c.MaxDeliver,
		MaxAckPending: 10_000,
		MaxWaiting:    4096,
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
func (c *Coordinator) ensureRuns(ctx context.Context, cfg ServeConfig, guard *natsbus.StreamGuard) (jetstream.Consumer, jetstream.KeyValue, error) {
	list := runsStreams(c.subjects, cfg)
	if c.server != nil {
		if _, err := natsbus.ProvisionStreams(ctx, c.js, list); err != nil {
			return nil, nil, fmt.Errorf("coordinator: %w", err)
		}
	} else {
		natsbus.CreateMissingStreams(ctx, c.js, list, c.log)
	}
	if guard != nil {
		if err := guard.Check(ctx); err != nil {
			return nil, nil, fmt.Errorf("coordinator: %w", err)
		}
	}
	kv, err := c.js.KeyValue(ctx, c.subjects.RunsBucket())
	if err != nil {
		return nil, nil, fmt.Errorf("coordinator: bucket %s: %w", c.subjects.RunsBucket(), err)
	}
	cons, err := c.js.CreateOrUpdateConsumer(ctx, c.subjects.RunsStream(), runsConsumerConfig(c.subjects, cfg))
	if err != nil {
		return nil, nil, fmt.Errorf("coordinator: consumer %s on %s: %w", c.subjects.RunsConsumer(), c.subjects.RunsStream(), err)
	}
	return cons, kv, nil
}

// JournalStreamConfig is the stream of run journals, one subject per run
// (<prefix>.journal.run.<run>) plus operators' cancel requests
// (<prefix>.journal.cancel.<run>), as natsbus.FleetStreams lists it.
func JournalStreamConfig(s protocol.Subjects) jetstream.StreamConfig {
	for _, fs := range natsbus.FleetStreams(s, natsbus.StreamConfig{}) {
		if fs.Config.Name == s.JournalStream() {
			return fs.Config
		}
	}
	panic("natsbus.FleetStreams lists no journal stream")
}
