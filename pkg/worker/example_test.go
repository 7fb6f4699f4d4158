package worker_test

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolfleet/toolfleet/pkg/fleettest"
	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/model/scripted"
	"github.com/toolfleet/toolfleet/pkg/runner"
	"github.com/toolfleet/toolfleet/pkg/tool"
	"github.com/toolfleet/toolfleet/pkg/worker"
)

// connect returns a connection to a fleet's NATS server as a worker, one
// as a coordinator, and a function that stops the fleet: here a fleet in
// this process (fleettest.New); in a program, nats.Connect(url,
// nats.UserCredentials(file)) as each role.
func connect() (worker, coordinator *nats.Conn, stop func()) {
	fleet, err := fleettest.New(fleettest.Config{})
	if err != nil {
		panic(err)
	}
	return fleet.ConnectWorker(), fleet.Conn(), func() { fleet.Close() }
}

// AddIn is the input of the add tool.
type AddIn struct {
	A float64 `json:"a" jsonschema:"the first term"`
	B float64 `json:"b" jsonschema:"the second term"`
}

func ExampleNew() {
	nc, coordinator, stop := connect()
	defer stop()

	add, err := tool.New(tool.Config{Name: "add", Description: "Adds two numbers.", Idempotent: true},
		func(ctx context.Context, in AddIn) (float64, error) { return in.A + in.B, nil })
	if err != nil {
		panic(err)
	}
	w, err := worker.New(nc, worker.Config{Tools: []harness.Tool{add}, Name: "example"})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }() // serves until ctx ends, then drains
	<-w.Published()                    // the tool is in the fleet's catalog

	// Any coordinator of the fleet can call it now; here, a runner in the
	// same program with a scripted model.
	model, _ := scripted.Parse([]byte(`{"turns": [
		{"tool_calls": [{"id": "c1", "name": "add", "arguments": {"a": 2, "b": 40}}]},
		{"content": "2 + 40 = {{result \"c1\"}}"}]}`))
	r, err := runner.New(ctx, coordinator, runner.Config{Model: model})
	if err != nil {
		panic(err)
	}
	defer r.Close()
	res, err := r.Run(ctx, "What is 2 + 40?")
	if err != nil {
		panic(err)
	}
	fmt.Println(res.Answer)

	cancel()
	fmt.Println("stopped:", <-done)
	// Output:
	// 2 + 40 = 42
	// stopped: <nil>
}

func ExampleWorker_Ready() {
	nc, _, stop := connect()
	defer stop()
	w, err := worker.New(nc, worker.Config{Tools: []harness.Tool{harness.Echo()}})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.Run(ctx)
	<-w.Published()
	// A health endpoint answers from the probes. Ready reports an error
	// until the worker's consumers exist, a moment after its tools are
	// published: an orchestrator asks again, as this does.
	probe, cancelProbe := context.WithTimeout(ctx, 5*time.Second)
	defer cancelProbe()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for w.Ready(probe) != nil && probe.Err() == nil {
		<-tick.C
	}
	fmt.Println(w.Healthy(probe), w.Ready(probe))
	// Output: <nil> <nil>
}
