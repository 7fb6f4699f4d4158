package workerbus

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// ProvisionToolConsumers creates the shared consumer of each tool in
// tools, configured as a worker with the default WorkerConfig creates it
// (workers then adjust it to their own settings). A tool whose workers
// have credentials of their own gets its consumer this way before any
// worker starts: the calls stream is a work queue, on which the server
// refuses any other consumer whose filter covers the tool's calls.
func ProvisionToolConsumers(ctx context.Context, js jetstream.JetStream, s protocol.Subjects, tools []string) ([]natsbus.ProvisionAction, error) {
	cfg := WorkerConfig{}.withDefaults()
	var done []natsbus.ProvisionAction
	for _, name := range tools {
		tool, err := protocol.ParseToolName(name)
		if err != nil {
			return done, err
		}
		// Both classes' consumers: the server then refuses any other
		// consumer whose filter covers either.
		interactive, batch, err := classConsumerConfigs(s, tool, cfg)
		if err != nil {
			return done, err
		}
		for _, cc := range []jetstream.ConsumerConfig{interactive, batch} {
			a := natsbus.ProvisionAction{Stream: s.CallsStream() + " consumer " + cc.Durable, Action: natsbus.ActionUnchanged}
			if _, err := js.Consumer(ctx, s.CallsStream(), cc.Durable); errors.Is(err, jetstream.ErrConsumerNotFound) {
				if _, err := js.CreateConsumer(ctx, s.CallsStream(), cc); err != nil {
					return done, fmt.Errorf("natsbus: consumer %s: %w", cc.Durable, err)
				}
				a.Action = natsbus.ActionCreated
			} else if err != nil {
				return done, fmt.Errorf("natsbus: consumer %s: %w", cc.Durable, err)
			}
			done = append(done, a)
		}
	}
	return done, nil
}
