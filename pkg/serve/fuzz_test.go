package serve

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// FuzzServeRequest feeds any bytes to the service's request decoder and
// applies the limits of an accepted request to fixed ceilings: decoding
// never panics and fails only with a *protocol.Error, and the applied
// limits never exceed a ceiling, never drop an operator's approval rule,
// and always form a valid loop configuration.
func FuzzServeRequest(f *testing.F) {
	for _, s := range []string{
		`{"prompt": "hi"}`,
		`{"prompt": "hi", "max_rounds": 1000000, "max_tool_calls_per_round": 1, "max_observation_chars": 99999999, "tool_timeout_ms": 9223372036854775807}`,
		`{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "", "tool_calls": [{"id": "a", "type": "function", "function": {"name": "echo", "arguments": "{}"}}]}, {"role": "tool", "tool_call_id": "a", "content": "x"}]}`,
		`{"messages": [{"role": "user", "content": "hi", "extra": 1}]}`,
		`{"prompt": "hi", "require_approval": ["*", "echo", "deploy"]}`,
		`{"messages": {}}`, `{"messages": [[]]}`, `{"v": 1}`, `[]`, `nul`,
	} {
		f.Add([]byte(s))
	}
	ceilings := []loop.Config{
		{MaxRounds: 4, MaxToolCallsPerRound: 8, MaxObservationChars: 500, RequireApproval: []string{"deploy"}},
		{MaxRounds: 2, ToolTimeout: 3 * time.Second},
		{},
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		req, msgs, err := decodeRunRequest(data, 4096)
		if err != nil {
			var pe *protocol.Error
			if !errors.As(err, &pe) {
				t.Fatalf("error of type %T, want *protocol.Error", err)
			}
			return
		}
		if req.HasMessages() && (len(msgs) == 0 || len(msgs) > MaxRunMessages) {
			t.Fatalf("accepted %d messages", len(msgs))
		}
		for _, ceil := range ceilings {
			got := applyLimits(ceil, req)
			lc := got.loop
			c := ceil
			if c.MaxRounds == 0 {
				c.MaxRounds = loop.DefaultMaxRounds
			}
			if c.MaxToolCallsPerRound == 0 {
				c.MaxToolCallsPerRound = loop.DefaultMaxToolCallsPerRound
			}
			if c.MaxObservationChars == 0 {
				c.MaxObservationChars = loop.DefaultMaxObservationChars
			}
			if lc.MaxRounds > c.MaxRounds || lc.MaxToolCallsPerRound > c.MaxToolCallsPerRound || lc.MaxObservationChars > c.MaxObservationChars {
				t.Fatalf("limits %d/%d/%d above ceilings %d/%d/%d", lc.MaxRounds, lc.MaxToolCallsPerRound, lc.MaxObservationChars,
					c.MaxRounds, c.MaxToolCallsPerRound, c.MaxObservationChars)
			}
			if c.ToolTimeout > 0 && lc.ToolTimeout > c.ToolTimeout {
				t.Fatalf("tool timeout %v above the ceiling %v", lc.ToolTimeout, c.ToolTimeout)
			}
			if c.ToolTimeout == 0 && (lc.ToolTimeout != 0 || (req.ToolTimeoutMS > 0) != (got.toolCap > 0)) {
				t.Fatalf("without an override: ToolTimeout %v cap %v for tool_timeout_ms %d", lc.ToolTimeout, got.toolCap, req.ToolTimeoutMS)
			}
			for _, name := range ceil.RequireApproval {
				if !slices.Contains(lc.RequireApproval, name) {
					t.Fatalf("approval rule %q dropped", name)
				}
			}
			if err := lc.Validate(); err != nil {
				t.Fatalf("applied configuration invalid: %v", err)
			}
		}
	})
}
