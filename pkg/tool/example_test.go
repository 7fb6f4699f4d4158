package tool_test

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/tool"
)

// WeatherIn is the input of the weather tool: its fields and their
// jsonschema tags become the tool's JSON Schema.
type WeatherIn struct {
	City  string `json:"city" jsonschema:"the city to report on"`
	Units string `json:"units,omitempty" jsonschema:"celsius or fahrenheit"`
}

func ExampleNew() {
	weather, err := tool.New(tool.Config{Name: "weather", Description: "Reports the weather.", Idempotent: true},
		func(ctx context.Context, in WeatherIn) (string, error) {
			return "sunny in " + in.City, nil
		})
	if err != nil {
		panic(err)
	}
	fmt.Println(string(weather.Parameters))

	// A worker serves it (pkg/worker); the harness runs it the same way.
	h, err := harness.New(harness.Config{}, weather)
	if err != nil {
		panic(err)
	}
	r := h.Execute(context.Background(), harness.Call{Tool: "weather", Arguments: json.RawMessage(`{"city":"Oslo"}`)})
	fmt.Println(r.Outcome, r.Output)
	// Output:
	// {"type":"object","properties":{"city":{"type":"string","description":"the city to report on"},"units":{"type":"string","description":"celsius or fahrenheit"}},"required":["city"],"additionalProperties":false}
	// ok sunny in Oslo
}

func ExampleCallKeyFrom() {
	charge := tool.Must(tool.New(tool.Config{Name: "charge"}, func(ctx context.Context, in struct {
		Cents int `json:"cents"`
	}) (string, error) {
		// Pass the key downstream so that a retried charge happens once.
		return fmt.Sprintf("charged %d with Idempotency-Key %s", in.Cents, tool.CallKeyFrom(ctx)), nil
	}))
	h, _ := harness.New(harness.Config{}, charge)
	ctx := harness.WithCallKey(context.Background(), "run1.c1")
	fmt.Println(h.Execute(ctx, harness.Call{Tool: "charge", Arguments: json.RawMessage(`{"cents":250}`)}).Output)
	// Output: charged 250 with Idempotency-Key run1.c1
}
