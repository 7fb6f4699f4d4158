package fleettest_test

import (
	"context"
	"fmt"

	"github.com/toolfleet/toolfleet/pkg/fleettest"
	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/model/scripted"
	"github.com/toolfleet/toolfleet/pkg/runner"
	"github.com/toolfleet/toolfleet/pkg/tool"
)

// LookupIn is the input of the lookup tool.
type LookupIn struct {
	Order string `json:"order" jsonschema:"the order id"`
}

// A whole fleet in one process, from an Example or a main: in a test,
// fleettest.Start(t, cfg) does the same and closes it when the test ends.
func Example() {
	lookup := tool.Must(tool.New(tool.Config{Name: "lookup_order", Idempotent: true},
		func(_ context.Context, in LookupIn) (string, error) { return "order " + in.Order + " shipped", nil }))
	fleet, err := fleettest.New(fleettest.Config{Tools: []harness.Tool{lookup}})
	if err != nil {
		panic(err)
	}
	defer fleet.Close()

	model, err := scripted.Parse([]byte(`{"turns": [
		{"tool_calls": [{"id": "c1", "name": "lookup_order", "arguments": {"order": "A-17"}}]},
		{"content": "Your {{result \"c1\"}}."}]}`))
	if err != nil {
		panic(err)
	}
	res, err := fleet.Runner(runner.Config{Model: model}).Run(context.Background(), "Where is my order A-17?")
	if err != nil {
		panic(err)
	}
	fmt.Println(res.Answer)
	c1, _ := res.Call("c1")
	fmt.Println(c1.Outcome, c1.Worker)
	// The fleet's workers, and a client of the fleet.
	fmt.Println(len(fleet.Workers()), fleet.Client().Name(), fleet.Prefix(), fleet.URL() == "")
	// Output:
	// Your order A-17 shipped.
	// ok fleettest-1
	// 1 client fleet true
}
