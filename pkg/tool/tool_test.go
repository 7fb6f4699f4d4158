package tool_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/toolfleet/toolfleet/pkg/config"
	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/protocol"
	"github.com/toolfleet/toolfleet/pkg/tool"
)

type addIn struct {
	A float64 `json:"a" jsonschema:"the first term"`
	B float64 `json:"b" jsonschema:"the second term"`
}

type sumOut struct {
	Sum float64 `json:"sum"`
	Key string  `json:"key,omitempty"`
}

func newHarness(t *testing.T, tools ...harness.Tool) *harness.Harness {
	t.Helper()
	h, err := harness.New(harness.Config{}, tools...)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestTypedTool(t *testing.T) {
	add := tool.Must(tool.New(tool.Config{Name: "add", Description: "Adds."},
		func(ctx context.Context, in addIn) (sumOut, error) {
			return sumOut{Sum: in.A + in.B, Key: tool.CallKeyFrom(ctx)}, nil
		}))
	text := tool.Must(tool.New(tool.Config{Name: "greet"},
		func(_ context.Context, in struct {
			Name string `json:"name"`
		}) (string, error) {
			return "hello " + in.Name, nil
		}))
	var schema map[string]any
	if err := json.Unmarshal(add.Parameters, &schema); err != nil {
		t.Fatal(err)
	}
	props, _ := schema["properties"].(map[string]any)
	if a, _ := props["a"].(map[string]any); a["description"] != "the first term" {
		t.Errorf("schema of a = %v, want its description", props["a"])
	}
	h := newHarness(t, add, text)
	ctx := harness.WithCallKey(t.Context(), "k1")
	for _, tc := range []struct {
		name, tool, args, outcome, output string
	}{
		{"json out", "add", `{"a":1,"b":2}`, "ok", `{"sum":3,"key":"k1"}`},
		{"string stays text", "greet", `{"name":"ann"}`, "ok", "hello ann"},
		{"unknown field", "add", `{"a":1,"b":2,"c":3}`, "invalid_arguments", ""},
		{"missing field", "add", `{"a":1}`, "invalid_arguments", ""},
		{"wrong type", "add", `{"a":"1","b":2}`, "invalid_arguments", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := h.Execute(ctx, harness.Call{Tool: protocol.ToolName(tc.tool), Arguments: json.RawMessage(tc.args)})
			if string(r.Outcome) != tc.outcome {
				t.Fatalf("Outcome=%q (%q), want %q", r.Outcome, r.Output, tc.outcome)
			}
			if tc.output != "" && r.Output != tc.output {
				t.Errorf("Output=%q, want %q", r.Output, tc.output)
			}
		})
	}
}

func TestToolError(t *testing.T) {
	boom := errors.New("secret detail")
	fail := tool.Must(tool.New(tool.Config{Name: "fail"}, func(context.Context, struct{}) (string, error) { return "", boom }))
	r := newHarness(t, fail).Execute(t.Context(), harness.Call{Tool: "fail", Arguments: json.RawMessage(`{}`)})
	if r.Outcome != "failed" || r.Output != "" {
		t.Fatalf("Outcome=%q Output=%q, want failed and no message", r.Outcome, r.Output)
	}
}

func TestConfigErrors(t *testing.T) {
	ok := func(context.Context, addIn) (string, error) { return "", nil }
	for _, tc := range []struct {
		name, field string
		new         func() error
	}{
		{"name not a token", "Name", func() error { _, err := tool.New(tool.Config{Name: "a.b"}, ok); return err }},
		{"empty name", "Name", func() error { _, err := tool.New(tool.Config{}, ok); return err }},
		{"negative timeout", "Timeout", func() error { _, err := tool.New(tool.Config{Name: "a", Timeout: -1}, ok); return err }},
		{"nil func", "Func", func() error { _, err := tool.New[addIn, string](tool.Config{Name: "a"}, nil); return err }},
		{"scalar input", "In", func() error {
			_, err := tool.New(tool.Config{Name: "a"}, func(context.Context, int) (string, error) { return "", nil })
			return err
		}},
		{"input without schema", "In", func() error {
			_, err := tool.New(tool.Config{Name: "a"}, func(context.Context, struct{ C chan int }) (string, error) { return "", nil })
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.new()
			var ce config.Error
			if !errors.As(err, &ce) || ce.ConfigField() != tc.field {
				t.Fatalf("err=%v, want a config.Error of %s", err, tc.field)
			}
		})
	}
}
