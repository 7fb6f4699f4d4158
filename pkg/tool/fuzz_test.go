package tool_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/protocol"
	"github.com/toolfleet/toolfleet/pkg/tool"
)

type fuzzIn struct {
	Name  string            `json:"name"`
	Count int8              `json:"count"`
	Tags  []string          `json:"tags,omitempty"`
	Meta  map[string]uint16 `json:"meta,omitempty"`
	Inner *struct {
		OK bool `json:"ok"`
	} `json:"inner,omitempty"`
}

// FuzzArguments: whatever the arguments, a typed tool is answered ok (and
// then its input round-trips), invalid_arguments or failed (a value the
// schema lets through that the Go type cannot hold), and never panics.
func FuzzArguments(f *testing.F) {
	for _, s := range []string{`{"name":"a","count":1}`, `{"name":"a","count":300}`, `{"name":"a","count":1,"x":1}`,
		`{"name":"a","count":1,"meta":{"k":70000}}`, `{"name":"a","count":1.5}`, `[]`, `{`, `{"name":"a","count":1,"inner":null}`} {
		f.Add(s)
	}
	echo := tool.Must(tool.New(tool.Config{Name: "echo_in"}, func(_ context.Context, in fuzzIn) (fuzzIn, error) { return in, nil }))
	h, err := harness.New(harness.Config{}, echo)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, args string) {
		r := h.Execute(context.Background(), harness.Call{Tool: "echo_in", Arguments: json.RawMessage(args)})
		switch r.Outcome {
		case protocol.OutcomeOK:
			var back fuzzIn
			if err := json.Unmarshal([]byte(r.Output), &back); err != nil {
				t.Fatalf("output %q does not decode: %v", r.Output, err)
			}
		case protocol.OutcomeInvalidArguments, protocol.OutcomeFailed:
		default:
			t.Fatalf("Outcome=%q for %q", r.Outcome, args)
		}
	})
}
