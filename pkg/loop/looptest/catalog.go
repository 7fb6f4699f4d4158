package looptest

import (
	"context"
	"sync"

	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// Catalog is a static [loop.Catalog]. Err, when set, is returned instead of
// the specs.
type Catalog struct {
	Specs []protocol.ToolSpec
	Err   error
}

var _ loop.Catalog = (*Catalog)(nil)

// NewCatalog returns a Catalog of specs.
func NewCatalog(specs ...protocol.ToolSpec) *Catalog { return &Catalog{Specs: specs} }

// Tools implements [loop.Catalog].
func (c *Catalog) Tools(ctx context.Context) ([]protocol.ToolSpec, error) {
	if c.Err != nil {
		return nil, c.Err
	}
	return append([]protocol.ToolSpec(nil), c.Specs...), nil
}

// MustSpec returns a valid spec for a tool with the given JSON Schema for
// its parameters, digest included. It panics if parameters is not JSON.
func MustSpec(name protocol.ToolName, parameters string) protocol.ToolSpec {
	d, err := protocol.SchemaDigest([]byte(parameters))
	if err != nil {
		panic("looptest: MustSpec: " + err.Error())
	}
	return protocol.ToolSpec{V: protocol.Version, Name: name, Description: "the " + string(name) + " tool",
		Parameters: []byte(parameters), SchemaDigest: d}
}

// Gate is a func-field [loop.Gate] that records its requests. A nil Func
// denies every call.
type Gate struct {
	Func func(ctx context.Context, req protocol.ApprovalRequest) (loop.Decision, error)

	mu   sync.Mutex
	reqs []protocol.ApprovalRequest
}

var _ loop.Gate = (*Gate)(nil)

// AllowAll is a Gate that approves every call, with a proof as the NATS
// gate gives one (its sequences are made up), so tests can check that
// every approved call is published carrying it.
func AllowAll() *Gate {
	return &Gate{Func: func(context.Context, protocol.ApprovalRequest) (loop.Decision, error) {
		return loop.Decision{Approved: true, Approver: "looptest", Proof: &protocol.ApprovalProof{RequestSeq: 1, DecisionSeq: 2}}, nil
	}}
}

// DenyAll is a Gate that denies every call with reason.
func DenyAll(reason string) *Gate {
	return &Gate{Func: func(context.Context, protocol.ApprovalRequest) (loop.Decision, error) {
		return loop.Decision{Reason: reason, Approver: "looptest"}, nil
	}}
}

// Approve implements [loop.Gate].
func (g *Gate) Approve(ctx context.Context, req protocol.ApprovalRequest) (loop.Decision, error) {
	g.mu.Lock()
	g.reqs = append(g.reqs, req)
	g.mu.Unlock()
	if g.Func == nil {
		return loop.Decision{}, nil
	}
	return g.Func(ctx, req)
}

// Requests returns the requests received so far.
func (g *Gate) Requests() []protocol.ApprovalRequest {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]protocol.ApprovalRequest(nil), g.reqs...)
}
