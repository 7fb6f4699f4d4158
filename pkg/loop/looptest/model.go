package looptest

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/toolfleet/toolfleet/pkg/loop"
)

// ErrScriptExhausted is returned by a scripted [Model] asked for more turns
// than it has.
var ErrScriptExhausted = errors.New("looptest: model script exhausted")

// Turn is one scripted model answer: an error, or an assistant message with
// or without tool calls.
type Turn struct {
	Content      string
	Calls        []loop.ToolCall
	Usage        loop.Usage
	FinishReason string // default "stop", or "tool_calls" when Calls is set
	Err          error
}

// Answer is a turn that answers text without calling a tool.
func Answer(text string) Turn { return Turn{Content: text} }

// Calls is a turn that calls tools.
func Calls(calls ...loop.ToolCall) Turn { return Turn{Calls: calls} }

// Call builds one tool call as a model would write it.
func Call(id, tool, arguments string) loop.ToolCall {
	return loop.ToolCall{ID: id, Type: "function", Function: loop.FunctionCall{Name: tool, Arguments: arguments}}
}

// Model is a scripted, in-memory [loop.Model]. It answers with Func when
// set, else with the next of Turns. Before answering it checks the incoming
// transcript with [CheckTranscript] and fails as a real API would. It
// records every request and honours its context.
type Model struct {
	Turns []Turn
	Func  func(loop.Request) (*loop.Response, error)

	mu   sync.Mutex
	next int
	reqs []loop.Request
}

var _ loop.Model = (*Model)(nil)

// NewModel returns a Model that plays turns in order.
func NewModel(turns ...Turn) *Model { return &Model{Turns: turns} }

// ModelFunc returns a Model that answers every request with f.
func ModelFunc(f func(loop.Request) (*loop.Response, error)) *Model { return &Model{Func: f} }

// ErrInvalidTranscript wraps a [CheckTranscript] failure from Complete.
var ErrInvalidTranscript = errors.New("looptest: invalid transcript (a model API would answer 400)")

// Complete implements [loop.Model].
func (m *Model) Complete(ctx context.Context, req loop.Request) (*loop.Response, error) {
	m.mu.Lock()
	m.reqs = append(m.reqs, cloneRequest(req))
	m.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := CheckTranscript(req.Messages); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidTranscript, err)
	}
	if m.Func != nil {
		return m.Func(req)
	}
	m.mu.Lock()
	if m.next >= len(m.Turns) {
		m.mu.Unlock()
		return nil, ErrScriptExhausted
	}
	t := m.Turns[m.next]
	m.next++
	m.mu.Unlock()
	if t.Err != nil {
		return nil, t.Err
	}
	fr := t.FinishReason
	if fr == "" {
		fr = "stop"
		if len(t.Calls) > 0 {
			fr = "tool_calls"
		}
	}
	return &loop.Response{
		Message:      loop.Message{Role: "assistant", Content: t.Content, ToolCalls: append([]loop.ToolCall(nil), t.Calls...)},
		Usage:        t.Usage,
		FinishReason: fr,
	}, nil
}

// Requests returns a copy of every request Complete received.
func (m *Model) Requests() []loop.Request {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]loop.Request, len(m.reqs))
	for i, r := range m.reqs {
		out[i] = cloneRequest(r)
	}
	return out
}

func cloneRequest(r loop.Request) loop.Request {
	msgs := make([]loop.Message, len(r.Messages))
	for i, m := range r.Messages {
		msgs[i] = m
		msgs[i].ToolCalls = append([]loop.ToolCall(nil), m.ToolCalls...)
	}
	return loop.Request{Messages: msgs, Tools: append([]loop.ToolDef(nil), r.Tools...)}
}
