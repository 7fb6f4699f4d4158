package runner_test

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/toolfleet/toolfleet/pkg/fleettest"
	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/model/scripted"
	"github.com/toolfleet/toolfleet/pkg/protocol"
	"github.com/toolfleet/toolfleet/pkg/runner"
)

// connect returns a connection to a fleet's NATS server as a
// coordinator, with a worker serving the built-in calculator, and a
// function that stops both: here a fleet in this process
// (fleettest.New); in a program, nats.Connect(url) to a running fleet.
func connect() (*nats.Conn, func()) {
	tools, _ := harness.Builtins([]string{"calculator"})
	fleet, err := fleettest.New(fleettest.Config{Tools: tools})
	if err != nil {
		panic(err)
	}
	return fleet.Conn(), func() { fleet.Close() }
}

func ExampleNew() {
	nc, stop := connect()
	defer stop()
	ctx := context.Background()

	r, err := runner.New(ctx, nc, runner.Config{Model: scripted.Demo()})
	if err != nil {
		panic(err)
	}
	defer r.Close()
	res, err := r.Run(ctx, "What is (17 + 25) * 3, what is 2 ** 10, and what is their sum?")
	if err != nil {
		panic(err)
	}
	fmt.Println(res.TerminationReason, res.Metadata.Rounds, "rounds")
	for _, c := range res.Calls {
		fmt.Println(c.CallID, c.Tool, c.Outcome)
	}
	// Output:
	// natural 3 rounds
	// c1 calculator ok
	// c2 calculator ok
	// c3 calculator ok
}

func ExampleRunner_RunDurable() {
	nc, stop := connect()
	defer stop()
	ctx := context.Background()
	model, _ := scripted.Parse([]byte(`{"turns": [
		{"tool_calls": [{"id": "c1", "name": "calculator", "arguments": {"expression": "6 * 7"}}]},
		{"content": "6 * 7 = {{result \"c1\"}}"}]}`))

	r, err := runner.New(ctx, nc, runner.Config{Model: model})
	if err != nil {
		panic(err)
	}
	defer r.Close()
	id := protocol.NewRunID() // keep it: Resume continues the run by its id
	res, err := r.RunDurable(ctx, id, "What is 6 * 7?")
	if err != nil {
		panic(err)
	}
	fmt.Println(res.Answer)

	// Another process (here another runner) resumes it from its journal:
	// a finished run gives its result again, running nothing twice.
	again, err := runner.New(ctx, nc, runner.Config{Model: model})
	if err != nil {
		panic(err)
	}
	defer again.Close()
	res, err = again.Resume(ctx, id)
	if err != nil {
		panic(err)
	}
	fmt.Println(res.Answer)
	// Output:
	// 6 * 7 = 42
	// 6 * 7 = 42
}

func ExampleRunner_RunMessages() {
	nc, stop := connect()
	defer stop()
	ctx := context.Background()
	model, _ := scripted.Parse([]byte(`{"turns": [
		{"tool_calls": [{"id": "c1", "name": "calculator", "arguments": {"expression": "2 ** 10"}}]},
		{"content": "{{result \"c1\"}}"}]}`))
	r, err := runner.New(ctx, nc, runner.Config{Model: model})
	if err != nil {
		panic(err)
	}
	defer r.Close()
	// A conversation so far, continued by the loop.
	res, err := r.RunMessages(ctx, []loop.Message{
		{Role: "system", Content: "You are a calculator."},
		{Role: "user", Content: "What is 2 ** 10?"},
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(res.Answer, len(res.Messages))
	// Output: 1024 5
}
