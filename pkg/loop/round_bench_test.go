package loop_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/loop/looptest"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// BenchmarkRun measures the coordinator's own work for one run of one round
// of n echo calls over the in-memory fleet (no NATS): validation,
// canonical arguments, dispatch, gathering, observations and the trace
// lines at info level.
func BenchmarkRun(b *testing.B) {
	for _, n := range []int{1, 32} {
		b.Run(strconv.Itoa(n)+"-calls", func(b *testing.B) {
			args := `{"text":"` + strings.Repeat("x", 128) + `"}`
			calls := make([]loop.ToolCall, n)
			for i := range calls {
				calls[i] = looptest.Call("call_"+strconv.Itoa(i), "echo", args)
			}
			model := looptest.ModelFunc(func(req loop.Request) (*loop.Response, error) {
				if len(req.Messages) > 1 {
					return &loop.Response{Message: loop.Message{Role: "assistant", Content: "done"}}, nil
				}
				return &loop.Response{Message: loop.Message{Role: "assistant", ToolCalls: calls}}, nil
			})
			catalog := looptest.NewCatalog(looptest.MustSpec("echo",
				`{"type":"object","properties":{"text":{"type":"string","maxLength":100000}},"required":["text"],"additionalProperties":false}`))
			fleet := looptest.New(func(_ context.Context, c protocol.Call) (protocol.Result, bool) {
				return looptest.OK(strings.Repeat("x", 128)), true
			})
			r, err := loop.New(loop.Config{Logger: zerolog.New(discard{}).Level(zerolog.InfoLevel)}, model, catalog, fleet, nil)
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				res, err := r.Run(ctx, "bench")
				if err != nil || res.Metadata.Outcomes[protocol.OutcomeOK] != n {
					b.Fatalf("run: %v, outcomes %v", err, res.Metadata.Outcomes)
				}
			}
		})
	}
}
