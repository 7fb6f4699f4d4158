package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolfleet/toolfleet/internal/natsbus/stores"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// Request is a run to submit: a prompt, or a transcript to continue.
type Request struct {
	// Prompt is the user's message. Exactly one of Prompt and Messages is
	// required.
	Prompt string
	// Messages is a transcript to continue (every tool call answered once,
	// right after its assistant message).
	Messages []loop.Message
	// Agent names the agent to run; "" means [protocol.DefaultAgent].
	Agent string
	// ID is the submission id; submitting the same ID again never creates
	// a second run. Default: a fresh random id.
	ID string
	// Limits lower the coordinators' own limits for this run.
	Limits Limits
	// Class is the run's priority class (protocol.ClassInteractive or
	// protocol.ClassBatch): a tool's waiting interactive calls start
	// before its batch calls. Default: the agent's class, else
	// interactive.
	Class protocol.Class
}

// Limits lower the serving coordinators' limits for one run: 0 keeps
// theirs, a value above theirs is lowered to it.
type Limits struct {
	MaxRounds            int
	MaxToolCallsPerRound int
	MaxObservationChars  int
	// ToolTimeout lowers every call's timeout.
	ToolTimeout time.Duration
	// RequireApproval names more tools (or "*") whose calls need a
	// human's approval in this run.
	RequireApproval []string
}

// body returns the request's wire form.
func (r Request) body() ([]byte, error) {
	req := protocol.RunRequest{
		V: protocol.Version, Prompt: r.Prompt,
		MaxRounds: r.Limits.MaxRounds, MaxToolCallsPerRound: r.Limits.MaxToolCallsPerRound,
		MaxObservationChars: r.Limits.MaxObservationChars, RequireApproval: r.Limits.RequireApproval,
		Class: string(r.Class),
	}
	if r.Limits.ToolTimeout > 0 {
		req.ToolTimeoutMS = max(r.Limits.ToolTimeout.Milliseconds(), 1)
	}
	if len(r.Messages) > 0 {
		data, err := json.Marshal(r.Messages)
		if err != nil {
			return nil, err
		}
		req.Messages = data
	}
	if err := req.Validate(); err != nil {
		return nil, err
	}
	return protocol.Encode(&req)
}

// Submit submits req and returns its Run once the server has stored it.
// It retries (the same submission id, so never a second run) until the
// server stores it or ctx ends; without a deadline on ctx it tries for up
// to 30s. A request that breaks the protocol's rules is refused before
// anything is sent ([protocol.Error]).
func (c *Client) Submit(ctx context.Context, req Request) (Run, error) {
	data, err := req.body()
	if err != nil {
		return Run{}, err
	}
	return c.SubmitRaw(ctx, req.Agent, req.ID, data)
}

// SubmitRaw is [Client.Submit] with the request already encoded, as "nats
// req" sends it: the serving coordinator checks it, and a refused request
// gets a stored result saying why ([RefusedError] from [Client.Wait]).
func (c *Client) SubmitRaw(ctx context.Context, agent, id string, data []byte) (Run, error) {
	if id == "" {
		id = protocol.NewID()
	}
	run, err := c.RunOf(agent, id)
	if err != nil {
		return Run{}, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
	}
	subject, err := c.subjects.RunSubmission(c.name, run.Agent, id)
	if err != nil {
		return Run{}, err
	}
	var last error
	for attempt := 1; ; attempt++ {
		msg := nats.NewMsg(subject)
		msg.Data = data
		msg.Header.Set(protocol.HeaderMsgID, protocol.SubmissionMsgID(c.name, id))
		msg.Header.Set(protocol.HeaderAgent, run.Agent)
		actx, cancel := context.WithTimeout(ctx, c.attempt)
		dup, err := stores.SubmitRun(actx, c.js, msg)
		cancel()
		switch {
		case err == nil:
			run.Duplicate = dup
			return run, nil
		case errors.Is(err, nats.ErrMaxPayload):
			return Run{}, &protocol.Error{Code: protocol.CodeTooLarge, Field: "request", Msg: "over the server's max_payload"}
		case errors.Is(err, nats.ErrConnectionClosed):
			return Run{}, fmt.Errorf("client: submitting run %s: %w", run.ID, err)
		}
		last = err
		select {
		case <-ctx.Done():
			return Run{}, fmt.Errorf("client: submitting run %s (submission %s): %w (last attempt: %v)", run.ID, id, ctx.Err(), last)
		case <-time.After(min(time.Duration(attempt)*100*time.Millisecond, time.Second)):
		}
	}
}
