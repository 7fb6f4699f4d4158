package loop_test

import (
	"context"
	"strings"
	"testing"

	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/loop/looptest"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// TestWorkerRefusalTexts: a worker's denial of an approved call reads, to
// the model, as what happened — no valid approval, or a valid approval
// whose execution record the worker could not write — and both stay
// denied (fail closed).
func TestWorkerRefusalTexts(t *testing.T) {
	for _, tc := range []struct {
		errorType, want, notWant string
	}{
		{"approval:missing", "the worker found no valid approval", "could not record"},
		{loop.ErrorTypeRecordUnwritten, "the approval is valid, but the worker could not record that it runs the call", "found no valid approval"},
	} {
		t.Run(tc.errorType, func(t *testing.T) {
			m := looptest.NewModel(looptest.Calls(looptest.Call("a", "echo", `{"text":"x"}`)), looptest.Answer("ok"))
			cfg := fastConfig()
			cfg.RequireApproval = []string{"echo"}
			e := newEnv(t, cfg, m, func(ctx context.Context, c protocol.Call) (protocol.Result, bool) {
				return protocol.Result{Outcome: protocol.OutcomeDenied, ErrorType: tc.errorType}, true
			}, looptest.AllowAll())
			res, _ := e.run(t, "go")
			if len(res.Calls) != 1 || res.Calls[0].Outcome != protocol.OutcomeDenied {
				t.Fatalf("calls %+v, want one denied", res.Calls)
			}
			var text string
			for _, msg := range res.Messages {
				if msg.Role == "tool" {
					text = msg.Content
				}
			}
			if !strings.Contains(text, tc.want) || strings.Contains(text, tc.notWant) {
				t.Fatalf("the model read %q, want it to say %q and not %q", text, tc.want, tc.notWant)
			}
		})
	}
}
