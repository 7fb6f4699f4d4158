package mcpserve

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolfleet/toolfleet/internal/tracing"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// callID is the id of the one call of an MCP run.
const callID = "mcp_call"

// oneCall is the model of an MCP run: its only turn asks for the client's
// call, as the client wrote it.
type oneCall struct {
	name, args string
}

func (m *oneCall) Complete(context.Context, loop.Request) (*loop.Response, error) {
	return &loop.Response{
		Message: loop.Message{Role: "assistant", ToolCalls: []loop.ToolCall{{
			ID: callID, Type: "function", Function: loop.FunctionCall{Name: m.name, Arguments: m.args},
		}}},
		FinishReason: "tool_calls",
	}, nil
}

// handler runs one tools/call through the loop. A trace context in the
// request's _meta (traceparent, tracestate) makes the run's spans children
// of the client's span.
func (s *Server) handler(name string) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		select {
		case s.slots <- struct{}{}:
			defer func() { <-s.slots }()
		default:
			return nil, &jsonrpc.Error{Code: CodeOverloaded, Message: fmt.Sprintf(
				"overloaded: the server already runs %d calls, its limit; try again later", cap(s.slots))}
		}
		ctx, release := s.requestContext(ctx, req)
		defer release()
		ctx = tracing.ExtractMeta(ctx, req.Params.Meta)
		args := string(req.Params.Arguments)
		if args == "" || args == "null" {
			args = "{}"
		}
		p := s.progress(ctx, req)
		defer p.stop()
		ctx = p.withToolProgress(ctx)
		d, g := loop.Dispatcher(&progressDispatcher{Dispatcher: s.fleet.Dispatcher, p: p}), s.fleet.Gate
		if g != nil {
			g = &progressGate{Gate: g, p: p}
		}
		runner, err := loop.New(s.fleet.Loop, &oneCall{name: name, args: args}, s.fleet.Catalog, d, g)
		if err != nil {
			return nil, err
		}
		res, err := runner.Run(ctx, "tools/call "+name)
		if res == nil {
			return nil, err
		}
		return resultOf(res), nil
	}
}

// resultOf turns the run of one call into its MCP result.
func resultOf(res *loop.Result) *mcp.CallToolResult {
	var obs string
	for _, m := range res.Messages {
		if m.Role == "tool" && m.ToolCallID == callID {
			obs = m.Content
		}
	}
	outcome := protocol.OutcomeCancelled // a run that ended before its call
	meta := mcp.Meta{"toolfleet/run_id": string(res.RunID)}
	for _, c := range res.Calls {
		if c.CallID == callID {
			outcome = c.Outcome
			if c.CallKey != "" {
				meta["toolfleet/call_key"] = string(c.CallKey)
			}
			if c.ErrorType != "" {
				meta["toolfleet/error_type"] = c.ErrorType
			}
		}
	}
	meta[MetaOutcome] = string(outcome)
	if obs == "" && outcome != protocol.OutcomeOK {
		obs = fmt.Sprintf("The call ended %s.", outcome)
	}
	return &mcp.CallToolResult{
		Content: []mcp.Content{&mcp.TextContent{Text: obs}},
		IsError: outcome != protocol.OutcomeOK,
		Meta:    meta,
	}
}

// progress reports a call's stages to a client that sent a progressToken.
type progress struct {
	session *mcp.ServerSession
	token   any
	ctx     context.Context
	n       atomic.Int64
	done    chan struct{}
	once    sync.Once
}

func (s *Server) progress(ctx context.Context, req *mcp.CallToolRequest) *progress {
	tok := req.Params.GetProgressToken()
	if tok == nil || req.Session == nil {
		return nil
	}
	p := &progress{session: req.Session, token: tok, ctx: ctx, done: make(chan struct{})}
	start := time.Now()
	go func() {
		t := time.NewTicker(s.cfg.ProgressInterval)
		defer t.Stop()
		for {
			select {
			case <-p.done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				p.say(fmt.Sprintf("running for %s", time.Since(start).Round(time.Second)))
			}
		}
	}()
	return p
}

func (p *progress) say(msg string) {
	if p == nil {
		return
	}
	_ = p.session.NotifyProgress(p.ctx, &mcp.ProgressNotificationParams{
		ProgressToken: p.token, Progress: float64(p.n.Add(1)), Message: msg,
	})
}

func (p *progress) stop() {
	if p != nil {
		p.once.Do(func() { close(p.done) })
	}
}

// progressGate says that a call waits for an approval.
type progressGate struct {
	loop.Gate
	p *progress
}

func (g *progressGate) Approve(ctx context.Context, req protocol.ApprovalRequest) (loop.Decision, error) {
	g.p.say(fmt.Sprintf("waiting for an operator's approval (run %s, call %s)", req.RunID, req.CallKey))
	return g.Gate.Approve(ctx, req)
}

// progressDispatcher says when a worker starts the call.
type progressDispatcher struct {
	loop.Dispatcher
	p *progress
}

func (d *progressDispatcher) Publish(ctx context.Context, call loop.Outgoing) error {
	if d.p != nil {
		call.StartedNotices = true // "started on worker W"
	}
	err := d.Dispatcher.Publish(ctx, call)
	if err == nil {
		d.p.say("dispatched to the fleet")
	}
	return err
}

func (d *progressDispatcher) Open(ctx context.Context, run protocol.RunID) (loop.Inbox, error) {
	in, err := d.Dispatcher.Open(ctx, run)
	if err != nil || d.p == nil {
		return in, err
	}
	out := &tapInbox{Inbox: in, events: make(chan loop.Event), closed: make(chan struct{})}
	go func() {
		defer close(out.events)
		for {
			var ev loop.Event
			var ok bool
			select {
			case ev, ok = <-in.Events():
				if !ok {
					return
				}
			case <-out.closed:
				return
			}
			if ev.Started != nil {
				d.p.say(fmt.Sprintf("started on worker %s (attempt %d)", clip(ev.Started.Worker), ev.Started.Attempt))
			}
			select {
			case out.events <- ev:
			case <-out.closed:
				return
			}
		}
	}()
	return out, nil
}

// tapInbox is an inbox whose events pass through the progress reporter.
type tapInbox struct {
	loop.Inbox
	events chan loop.Event
	closed chan struct{}
	once   sync.Once
}

func (t *tapInbox) Events() <-chan loop.Event { return t.events }

func (t *tapInbox) Close() error {
	t.once.Do(func() { close(t.closed) })
	return t.Inbox.Close()
}

func clip(s string) string {
	s, _ = protocol.Truncate(s, 64)
	return s
}
