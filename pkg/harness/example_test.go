package harness_test

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/toolfleet/toolfleet/pkg/harness"
)

func ExampleHarness_Execute() {
	tools, err := harness.Builtins([]string{"calculator", "echo"})
	if err != nil {
		panic(err)
	}
	h, err := harness.New(harness.Config{}, tools...)
	if err != nil {
		panic(err)
	}
	for _, args := range []string{`{"expression":"-2**2 + 7/2"}`, `{"expression":"1/0"}`, `{"expr":"1"}`} {
		r := h.Execute(context.Background(), harness.Call{Tool: "calculator", Arguments: json.RawMessage(args)})
		fmt.Printf("%s %q %q\n", r.Outcome, r.Output, r.ErrorType)
	}
	// Output:
	// ok "-0.5" ""
	// failed "" "*harness.EvaluationError"
	// invalid_arguments "at '/': additional properties 'expr' not allowed; at '/': missing property 'expression'" ""
}

func ExampleParseManifest() {
	tools, err := harness.ParseManifest([]byte(`{"tools":[
		{"name":"count_bytes","description":"Count the bytes of the arguments.","command":["wc","-c"],"timeout":"5s","idempotent":true}
	]}`))
	if err != nil {
		panic(err)
	}
	h, err := harness.New(harness.Config{}, tools...)
	if err != nil {
		panic(err)
	}
	r := h.Execute(context.Background(), harness.Call{Tool: "count_bytes", Arguments: json.RawMessage(`{"a":1}`)})
	fmt.Printf("%s %q\n", r.Outcome, r.Output)
	// Output:
	// ok "7\n"
}
