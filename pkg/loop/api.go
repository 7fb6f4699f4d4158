package loop

import (
	"context"
	"encoding/json"

	"go.opentelemetry.io/otel/trace"

	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// Message is one chat message in the OpenAI chat-completions format; the
// transcript of a run is a []Message that any compatible API accepts.
type Message struct {
	Role       string     `json:"role"` // "system", "user", "assistant" or "tool"
	Content    string     `json:"content"`
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
	// Outcome is, on a tool message, how the call ended. Providers whose
	// format marks failed results (Anthropic's is_error) read it; any
	// outcome but ok is a failure. It is not part of the JSON form, which
	// stays the chat-completions format.
	Outcome protocol.Outcome `json:"-"`
}

// ToolCall is one call the model asked for, as the model wrote it. Every
// field is untrusted.
type ToolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"` // "function"
	Function FunctionCall `json:"function"`
}

// FunctionCall names the tool and carries its arguments as the JSON text the
// model produced (which may not be valid JSON).
type FunctionCall struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// ToolDef is what the model is told about one tool.
type ToolDef struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
}

// Request is one model call: the transcript so far and the tools on offer.
type Request struct {
	Messages []Message
	Tools    []ToolDef
}

// Usage counts tokens when the model reports them: 0 when it reports
// none, -1 when what it reports is not a count (a provider's adapter sets
// it). The loop counts a count it cannot believe (negative, or more than
// any context holds) as its estimate or the max_tokens reserve instead
// (Budget; Metadata reports what was counted).
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
}

// Response is the model's answer: one assistant message, with or without
// tool calls.
type Response struct {
	Message      Message
	Usage        Usage
	FinishReason string
}

// Model is a chat model that can call tools.
type Model interface {
	// Complete asks the model for its next assistant message. Errors end the
	// run with termination reason "error" after every open call id has been
	// answered.
	Complete(ctx context.Context, req Request) (*Response, error)
}

// Catalog lists the tools the fleet serves.
type Catalog interface {
	// Tools returns the current specs. The loop calls it once per round.
	Tools(ctx context.Context) ([]protocol.ToolSpec, error)
}

// Dispatcher moves calls to workers and their results back. It is only a
// transport: deadlines, deduplication, synthesized outcomes and ordering are
// the loop's job.
//
// A run's [Inbox] is bounded and never blocks whoever delivers into it:
// an event that finds its Events channel full is dropped and counted (the
// inbox has a Dropped() int64 method), while the events already queued stay
// in order. The loop answers a call whose result was dropped at its
// deadline, like one no worker answered, so every tool_call_id is still
// answered exactly once and a reader that falls behind cannot wedge the
// transport. The dispatchertest package holds implementations to this
// contract.
type Dispatcher interface {
	// Open starts receiving a run's results and progress notices. It is
	// called once per run, before any call of the run is published.
	Open(ctx context.Context, run protocol.RunID) (Inbox, error)
	// Publish hands one call to the fleet. An error means the call was not
	// accepted; the loop answers it itself.
	Publish(ctx context.Context, call Outgoing) error
	// Cancel asks whichever worker runs a call to stop. Best effort.
	Cancel(ctx context.Context, c protocol.Cancel) error
}

// WithStartedNotices returns a context under which a run asks the fleet
// for a started notice ([Event].Started) of every call it publishes
// ([Outgoing].StartedNotices), for a caller that shows a call's progress
// (coordinator mcp). Without it the loop asks for notices only where it
// needs them.
func WithStartedNotices(ctx context.Context) context.Context {
	return context.WithValue(ctx, startedNoticesKey{}, true)
}

// wantsStartedNotices reports whether ctx came from [WithStartedNotices].
func wantsStartedNotices(ctx context.Context) bool {
	v, _ := ctx.Value(startedNoticesKey{}).(bool)
	return v
}

type startedNoticesKey struct{}

// Outgoing is one call to publish and the facts the transport needs about
// it that the call itself does not carry on the wire.
type Outgoing struct {
	Call protocol.Call
	// AtMostOnce marks a call the catalog says is not idempotent: a fleet
	// runs it only after claiming it, whatever a worker's own manifest
	// says. It is what makes a withdrawal ([WithdrawInbox]) true: a call a
	// worker runs unclaimed could be withdrawn while it runs.
	AtMostOnce bool
	// StartedNotices asks the fleet for a started notice ([Event].Started)
	// of the call. Without it a dispatcher may ask for notices only of
	// at-most-once calls, the only ones whose start the loop needs: it
	// decides outcome_unknown against timeout.
	StartedNotices bool
	// Trace is the call's span, for the transport to carry to the worker;
	// the zero value carries none.
	Trace trace.SpanContext
}

// BatchDispatcher is a [Dispatcher] that publishes a round's calls
// together, so that the transport can write them at once and wait for
// their acknowledgements together rather than one call at a time. The loop
// uses it when the dispatcher implements it.
type BatchDispatcher interface {
	Dispatcher
	// PublishBatch hands calls to the fleet and returns one error per
	// call, in order: nil means that call was accepted, as from Publish.
	// It returns once every call is accepted or has failed, or ctx ends.
	PublishBatch(ctx context.Context, calls []Outgoing) []error
}

// WithdrawInbox is an [Inbox] that can take back a published call of its
// run that no worker has claimed, so that none ever runs it. The loop asks
// it once, at the deadline, for each non-idempotent call still unanswered
// and not known to have started: a call withdrawn is answered timeout at
// once, with the model told that it did not run; one that could not be —
// a worker claimed it, or the inbox cannot tell — is awaited until its
// deadline plus grace and then answered outcome_unknown. Its answer
// decides; no started notice is needed. Without it the loop relies on the
// fleet's started notices ([Event].Started).
type WithdrawInbox interface {
	Inbox
	// Withdraw takes back the call of key. It reports true only when the
	// call will never run; false with a nil error means a worker claimed
	// it first (it may have run); an error means it cannot tell.
	Withdraw(ctx context.Context, key protocol.CallKey) (bool, error)
}

// ExpectInbox is an [Inbox] that delivers a result only for a call it
// knows: one its Dispatcher published, or one the loop tells it of with
// Expect — a call of a resumed round, which the run's previous owner
// published. It takes that result only from the call's own tool.
type ExpectInbox interface {
	Inbox
	Expect(key protocol.CallKey, tool protocol.ToolName)
}

// Inbox delivers what workers send back for one run. Events may be
// duplicated, late, for unknown call keys or forged; the loop copes. A
// full inbox drops new events (see [Dispatcher]).
type Inbox interface {
	Events() <-chan Event
	Close() error
}

// Event is one message from the fleet: exactly one of Result and Started
// is set.
type Event struct {
	Result  *protocol.Result
	Started *protocol.Started
	// Tool, for a Result, is the tool whose result subject carried it,
	// when the inbox knows: the loop then takes it only for a call of that
	// tool. Empty: not known, not checked.
	Tool protocol.ToolName
}

// Gate asks a human whether a call may run.
type Gate interface {
	// Approve blocks until a decision arrives, req.Deadline passes or ctx
	// ends. Any error means the call does not run. A ctx ended with cause
	// ErrHandedOff means the run goes on elsewhere: the request is still
	// pending and is asked again, with the same deadline, by the next owner.
	Approve(ctx context.Context, req protocol.ApprovalRequest) (Decision, error)
}

// Decision is a gate's answer.
type Decision struct {
	// Approved is true only for a valid, matching, in-time approval.
	Approved bool
	// Expired is true when no decision arrived before the deadline; it is
	// never attributed to a human.
	Expired bool
	// Reason is the operator's reason, if any.
	Reason string
	// Approver names who decided, as they said.
	Approver string
	// Proof points workers at the approval in the approvals stream, so
	// they can check it themselves; nil when the gate has none.
	Proof *protocol.ApprovalProof
}
