package serve

import (
	"context"

	"github.com/toolfleet/toolfleet/internal/termsafe"
	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// withClientProgress returns ctx under which the progress reports of the
// run's calls are passed on to the run's client, on core NATS, on
// [protocol.Subjects.ClientRunProgress]: a deployment lets each client
// subscribe to its own subjects only. The reports come bounded in rate
// from the dispatcher, each from its call's own tool; their text (the
// message and the worker's name) is made terminal-safe ([termsafe.Line])
// before it is passed on. Publishing never waits.
func (s *Server) withClientProgress(ctx context.Context, client string, run protocol.RunID) context.Context {
	subject, err := s.subjects.ClientRunProgress(client, run)
	if err != nil {
		return ctx
	}
	nc := s.nc
	next := loop.ProgressFrom(ctx)
	return loop.WithProgress(ctx, func(p protocol.Progress) {
		if next != nil {
			next(p)
		}
		p.Message = harness.ClipProgress(termsafe.Line(p.Message, 0))
		p.Worker = termsafe.Line(p.Worker, 64)
		if data, err := protocol.Encode(&p); err == nil {
			_ = nc.Publish(subject, data)
		}
	})
}
