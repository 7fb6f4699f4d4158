package harness_test

import (
	"context"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// benchHarness serves the built-in tools and logs at info level, as the
// commands do, to a writer that discards.
func benchHarness(b *testing.B) *harness.Harness {
	b.Helper()
	h, err := harness.New(harness.Config{Logger: zerolog.New(discard{}).Level(zerolog.InfoLevel)},
		harness.Echo(), harness.Calculator())
	if err != nil {
		b.Fatal(err)
	}
	return h
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

func BenchmarkExecute(b *testing.B) {
	for _, bc := range []struct {
		name, tool, args string
		want             protocol.Outcome
	}{
		{"echo/ok", "echo", `{"text":"` + strings.Repeat("x", 128) + `"}`, protocol.OutcomeOK},
		{"echo/invalid-arguments", "echo", `{"text":42}`, protocol.OutcomeInvalidArguments},
		{"calculator/ok", "calculator", `{"expression":"(17 + 25) * 3 - 2 ** 10 / 4"}`, protocol.OutcomeOK},
		{"calculator/failed", "calculator", `{"expression":"1 / 0"}`, protocol.OutcomeFailed},
		{"unknown-tool", "nope", `{}`, protocol.OutcomeUnknownTool},
	} {
		b.Run(bc.name, func(b *testing.B) {
			h := benchHarness(b)
			call := harness.Call{Tool: protocol.ToolName(bc.tool), Arguments: []byte(bc.args), MaxOutputChars: 12000}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if res := h.Execute(ctx, call); res.Outcome != bc.want {
					b.Fatalf("outcome %q, want %q", res.Outcome, bc.want)
				}
			}
		})
	}
}
