package fleettest_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"

	"github.com/toolfleet/toolfleet/pkg/fleettest"
	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/model/scripted"
	"github.com/toolfleet/toolfleet/pkg/runner"
	"github.com/toolfleet/toolfleet/pkg/tool"
)

// In a test, Start takes the test's *testing.T. An example has none: this
// stand-in runs the cleanups when the example ends.
type exampleT struct {
	testing.TB
	cleanups []func()
}

func (t *exampleT) Helper()                   {}
func (t *exampleT) Cleanup(f func())          { t.cleanups = append(t.cleanups, f) }
func (t *exampleT) Fatalf(f string, a ...any) { panic(fmt.Sprintf(f, a...)) }
func (t *exampleT) Errorf(f string, a ...any) { panic(fmt.Sprintf(f, a...)) }
func (t *exampleT) TempDir() string {
	d, err := os.MkdirTemp("", "fleettest-example-")
	if err != nil {
		panic(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}
func (t *exampleT) done() {
	for _, f := range slices.Backward(t.cleanups) {
		f()
	}
}

// LookupIn is the input of the lookup tool.
type LookupIn struct {
	Order string `json:"order" jsonschema:"the order id"`
}

func Example() {
	t := &exampleT{} // in a test: the test's t
	defer t.done()

	lookup := tool.Must(tool.New(tool.Config{Name: "lookup_order", Idempotent: true},
		func(_ context.Context, in LookupIn) (string, error) { return "order " + in.Order + " shipped", nil }))
	fleet := fleettest.Start(t, fleettest.Config{Tools: []harness.Tool{lookup}})

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
	// A client of the fleet gets its connection and prefix.
	fmt.Println(fleet.Conn().IsConnected(), fleet.Prefix(), fleet.URL() == "")
	// Output:
	// Your order A-17 shipped.
	// true fleet true
}
