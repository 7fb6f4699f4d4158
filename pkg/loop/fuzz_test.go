package loop_test

import (
	"context"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/loop/looptest"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// FuzzRound feeds a round of hostile tool calls to the loop and checks the
// contract: no error, a natural end, every id answered exactly once in a
// transcript a model API accepts, and consistent counts.
func FuzzRound(f *testing.F) {
	f.Add("a", "echo", `{"text":"x"}`, "b", "add", `{"a":1,"b":2}`, uint8(2))
	f.Add("", "echo", ``, "", "nope", `[`, uint8(1))
	f.Add("a", "echo", `{"text":"x"}`, "a", "echo", `{"text":"x"}`, uint8(32))
	f.Add("call_x", "a.b", `{"a":true}`, "\x00", "add", `{"a":1,"b":2,"c":3}`, uint8(0))
	f.Add("x", "echo", `"str"`, "y", "sleep", `{}`, uint8(3))
	f.Fuzz(func(t *testing.T, id1, tool1, args1, id2, tool2, args2 string, limit uint8) {
		calls := []loop.ToolCall{
			looptest.Call(id1, tool1, args1),
			looptest.Call(id2, tool2, args2),
			looptest.Call(id1, tool2, args1),
			looptest.Call(id2, tool1, args2),
		}
		m := looptest.NewModel(looptest.Calls(calls...), looptest.Answer("done"))
		d := looptest.New(func(ctx context.Context, c protocol.Call) (protocol.Result, bool) {
			return looptest.OK(string(c.Arguments)), true
		})
		cfg := loop.Config{MaxToolCallsPerRound: int(limit%5) + 1, ToolTimeout: time.Second,
			Grace: 10 * time.Millisecond, Logger: zerolog.Nop()}
		r, err := loop.New(cfg, m, looptest.NewCatalog(specs()...), d, nil)
		if err != nil {
			t.Fatal(err)
		}
		res, err := r.Run(t.Context(), "go")
		d.Wait()
		if err != nil || res == nil {
			t.Fatalf("Run: res=%v err=%v", res, err)
		}
		checkInvariants(t, res)
		if res.TerminationReason != loop.TerminationNatural || len(res.Calls) != len(calls) {
			t.Fatalf("reason=%q calls=%d, want natural and %d", res.TerminationReason, len(res.Calls), len(calls))
		}
		for _, c := range d.Published() {
			if err := c.Validate(); err != nil {
				t.Fatalf("published an invalid call: %v", err)
			}
		}
	})
}
