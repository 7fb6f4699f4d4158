package stores

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// A tool with workers of its own (StreamConfig.OwnRecordTools) keeps its
// execution records and start records in a claims and a starts stream of
// its own (protocol.Subjects.OwnClaimsStream, OwnStartsStream), on
// subjects its workers alone may write (<prefix>.own.<tool>.>): whatever
// they write, they fill only their tool's streams, and every other tool's
// approved and non-idempotent calls still run. Like the shared one, a
// tool's own starts stream takes no per-message TTL (the server refuses a
// record that carries one, "never" too): every record lives the stream's
// MaxAge, which covers the longest a call can wait for a worker.
//
// Every writer of a tool's records — its workers, and the coordinator
// that withdraws its calls — writes them where the tool's own starts
// stream says: its own streams when a stream captures its own start
// subjects (a stream-names lookup by subject, which reveals names only),
// the shared ones otherwise. A worker looks once per tool and keeps the answer for its
// life; a coordinator looks at each withdrawal. So a tool's own streams
// are created (coordinator provision --tool-consumer) before its workers
// start, and never removed.

// RecordRoute is where one tool's execution and start records are
// written: its own streams, or the shared ones.
type RecordRoute struct {
	s    protocol.Subjects
	tool protocol.ToolName
	own  bool
}

// Claim returns the stream and subject of the execution record of the
// call key of run.
func (r RecordRoute) Claim(run protocol.RunID, key protocol.CallKey) (stream, subject string, err error) {
	if r.own {
		subject, err = r.s.OwnClaim(r.tool, run, key)
		return r.s.OwnClaimsStream(r.tool), subject, err
	}
	subject, err = r.s.Claim(r.tool, run, key)
	return r.s.ClaimsStream(), subject, err
}

// Start returns the stream and subject of the start record of the call
// key of run.
func (r RecordRoute) Start(run protocol.RunID, key protocol.CallKey) (stream, subject string, err error) {
	if r.own {
		subject, err = r.s.OwnStart(r.tool, run, key)
		return r.s.OwnStartsStream(r.tool), subject, err
	}
	subject, err = r.s.Start(r.tool, run, key)
	return r.s.StartsStream(), subject, err
}

// RouteOf looks up where tool's records go: its own streams when its own
// starts stream captures the tool's own start subjects. An error other than "no such stream" leaves it
// unknown, and the record is not written (the call does not run).
func RouteOf(ctx context.Context, js jetstream.JetStream, s protocol.Subjects, tool protocol.ToolName) (RecordRoute, error) {
	if !tool.Valid() {
		return RecordRoute{}, errors.New("natsbus: invalid tool name")
	}
	name, err := js.StreamNameBySubject(ctx, s.OwnStarts(tool))
	switch {
	case err == nil && name == s.OwnStartsStream(tool):
		return RecordRoute{s: s, tool: tool, own: true}, nil
	case err == nil:
		return RecordRoute{}, fmt.Errorf("natsbus: the stream %s captures the start records of %s", name, tool)
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return RecordRoute{s: s, tool: tool}, nil
	}
	return RecordRoute{}, err
}

// RecordRoutes keeps each tool's route once looked up, for a worker.
type RecordRoutes struct {
	js jetstream.JetStream
	s  protocol.Subjects
	mu sync.Mutex
	of map[protocol.ToolName]RecordRoute
}

// NewRecordRoutes returns the routes of the fleet's tools on js.
func NewRecordRoutes(js jetstream.JetStream, s protocol.Subjects) *RecordRoutes {
	return &RecordRoutes{js: js, s: s}
}

// Route returns tool's route, looking it up the first time.
func (r *RecordRoutes) Route(ctx context.Context, tool protocol.ToolName) (RecordRoute, error) {
	r.mu.Lock()
	route, ok := r.of[tool]
	r.mu.Unlock()
	if ok {
		return route, nil
	}
	route, err := RouteOf(ctx, r.js, r.s, tool)
	if err != nil {
		return RecordRoute{}, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.of == nil {
		r.of = map[protocol.ToolName]RecordRoute{}
	}
	r.of[tool] = route
	return route, nil
}
