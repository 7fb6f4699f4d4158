package coordinator

import (
	"context"

	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// withClientProgress returns ctx under which the progress reports of the
// run's calls are passed on to the run's client, on core NATS, on
// [protocol.Subjects.ClientRunProgress]: a deployment lets each client
// subscribe to its own subjects only. The reports come bounded in rate
// from the dispatcher; publishing never waits.
func (s *service) withClientProgress(ctx context.Context, client string, run protocol.RunID) context.Context {
	subject, err := s.subjects.ClientRunProgress(client, run)
	if err != nil {
		return ctx
	}
	nc := s.c.nc
	next := loop.ProgressFrom(ctx)
	return loop.WithProgress(ctx, func(p protocol.Progress) {
		if next != nil {
			next(p)
		}
		if data, err := protocol.Encode(&p); err == nil {
			_ = nc.Publish(subject, data)
		}
	})
}
