package client_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/internal/coordinator"
	"github.com/toolfleet/toolfleet/pkg/client"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/model/scripted"
)

// serveFleet starts a coordinator serving runs on an embedded server with
// a scripted model, as "coordinator serve" does, and returns it and a
// func that stops it. (In a program, the fleet runs elsewhere and the
// connection comes from nats.Connect.)
func serveFleet(script string, requireApproval ...string) (*coordinator.Coordinator, func()) {
	model, err := scripted.Parse([]byte(script))
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c, err := coordinator.Open(ctx, coordinator.Config{Model: model, Builtins: []string{"calculator"}, Logger: zerolog.Nop(),
		Loop: loop.Config{RequireApproval: requireApproval}})
	if err != nil {
		panic(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Serve(ctx, coordinator.ServeConfig{ShutdownGrace: time.Second, PollWait: 100 * time.Millisecond})
	}()
	return c, func() { cancel(); <-done; c.Close() }
}

// Submit a run and wait for its result.
func Example() {
	fleet, stop := serveFleet(`{"turns": [
	  {"tool_calls": [{"id": "c1", "name": "calculator", "arguments": {"expression": "6 * 7"}}]},
	  {"content": "6 * 7 = {{result \"c1\"}}"}
	]}`)
	defer stop()

	c, err := client.New(fleet.Conn(), client.Config{})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The submission id makes a retry safe: submitting it again (after a
	// timeout, from another process) never starts a second run.
	run, err := c.Submit(ctx, client.Request{Prompt: "What is 6 * 7?", ID: "order-42"})
	if err != nil {
		panic(err)
	}
	res, err := c.Wait(ctx, run)
	if err != nil {
		panic(err)
	}
	fmt.Println(res.TerminationReason, res.Answer)
	// The run's calls, by tool_call_id.
	calls, err := client.LoopResult(res)
	if err != nil {
		panic(err)
	}
	c1, _ := calls.Call("c1")
	fmt.Println("c1:", c1.Tool, c1.Outcome, c1.Observation)

	again, _ := c.Submit(ctx, client.Request{Prompt: "What is 6 * 7?", ID: "order-42"})
	fmt.Println("same run:", again.ID == run.ID)
	// Output:
	// natural 6 * 7 = 42
	// c1: calculator ok 42
	// same run: true
}

// A request the coordinator refuses gets a stored result saying why.
func ExampleRefusedError() {
	fleet, stop := serveFleet(`{"turns": [{"content": "unused"}]}`)
	defer stop()
	c, err := client.New(fleet.Conn(), client.Config{})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	run, err := c.SubmitRaw(ctx, "", "", []byte(`{"prompt": "hi", "max_rounds": -1}`))
	if err != nil {
		panic(err)
	}
	_, err = c.Wait(ctx, run)
	var refused *client.RefusedError
	if errors.As(err, &refused) {
		fmt.Println(refused.Code, refused.Field)
	}
	// Output: invalid_field max_rounds
}

// An operator approves a call that needs a human's approval.
func ExampleClient_Approve() {
	fleet, stop := serveFleet(`{"turns": [
	  {"tool_calls": [{"id": "c1", "name": "calculator", "arguments": {"expression": "6 * 7"}}]},
	  {"content": "{{result \"c1\"}}"}
	]}`, "calculator")
	defer stop()
	c, err := client.New(fleet.Conn(), client.Config{})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	run, err := c.Submit(ctx, client.Request{Prompt: "What is 6 * 7?"})
	if err != nil {
		panic(err)
	}

	// The operator's side: wait for the run's request (no polling: it
	// returns when the request is stored), then approve it.
	req, err := c.WaitApproval(ctx, client.ApprovalFilter{Run: run.ID})
	if err != nil {
		panic(err)
	}
	fmt.Println("asks:", req.Tool, string(req.Arguments))
	outcome, err := c.Approve(ctx, req, client.Decision{Approver: "alice", Reason: "fine"})
	if err != nil {
		panic(err)
	}
	fmt.Println("outcome:", outcome)

	res, err := c.Wait(ctx, run)
	if err != nil {
		panic(err)
	}
	fmt.Println("answer:", res.Answer)
	// Output:
	// asks: calculator {"expression":"6 * 7"}
	// outcome: approved
	// answer: 42
}
