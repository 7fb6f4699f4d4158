package serve

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"

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
// before it is passed on. Publishing never waits. Unless Config's
// NoCallStarts is set, the run also asks the fleet for every call's
// started notice ([loop.WithStartedNotices]), which [Server.withClientStarts]
// passes on.
func (s *Server) withClientProgress(ctx context.Context, client string, run protocol.RunID) context.Context {
	subject, err := s.subjects.ClientRunProgress(client, run)
	if err != nil {
		return ctx
	}
	if !s.cfg.NoCallStarts {
		ctx = loop.WithStartedNotices(ctx)
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

// withClientStarts returns obs and, unless Config's NoCallStarts is set,
// an observer that passes each call's start on to the run's client on
// the subject of its progress, as a [protocol.CallStarted]: once per
// call, when the loop hears the first of its worker's started notices,
// with the worker's name made terminal-safe. Nothing is journaled: a
// start is live, like progress. Publishing never waits.
func (s *Server) withClientStarts(obs loop.Observer, client string, run protocol.RunID) loop.Observer {
	subject, err := s.subjects.ClientRunProgress(client, run)
	if err != nil || s.cfg.NoCallStarts {
		return obs
	}
	return loop.Observers(obs, clientStarts{nc: s.nc, subject: subject})
}

// clientStarts publishes each call's start on subject.
type clientStarts struct {
	loop.NopObserver
	nc      *nats.Conn
	subject string
}

var _ loop.CallObserver = clientStarts{}

// CallEvent implements [loop.CallObserver].
func (c clientStarts) CallEvent(ev loop.CallEvent) {
	if ev.Phase != loop.CallStartedPhase || ev.Tool == "" {
		return
	}
	m := protocol.CallStarted{V: protocol.Version, RunID: ev.Run, CallKey: ev.CallKey,
		CallID: protocol.CallID(termsafe.Line(ev.CallID, 64)), Tool: protocol.ToolName(ev.Tool),
		Worker: termsafe.Line(ev.Worker, 64), StartedAt: time.Now().UTC()}
	if m.Validate() != nil {
		return
	}
	if data, err := protocol.Encode(&m); err == nil {
		_ = c.nc.Publish(c.subject, data)
	}
}
