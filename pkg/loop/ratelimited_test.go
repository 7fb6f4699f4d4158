package loop_test

import (
	"context"
	"testing"

	"github.com/toolfleet/toolfleet/pkg/loop/looptest"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// A worker's rate_limited answer is the call's outcome, and its
// observation tells the model the call did not run and when to try again
// (whole seconds, rounded up, at least 1s).
func TestRateLimitedObservation(t *testing.T) {
	for _, tc := range []struct {
		retryMS int64
		want    string
	}{
		{1500, "Tool 'echo' rate limited: the tool's rate limit was reached and this call did not run. Try again in 2s or later."},
		{1, "Tool 'echo' rate limited: the tool's rate limit was reached and this call did not run. Try again in 1s or later."},
		{0, "Tool 'echo' rate limited: the tool's rate limit was reached and this call did not run. Try again in 1s or later."},
	} {
		m := looptest.NewModel(looptest.Calls(looptest.Call("c1", "echo", `{"text":"x"}`)), looptest.Answer("ok"))
		h := func(ctx context.Context, c protocol.Call) (protocol.Result, bool) {
			return protocol.Result{Outcome: protocol.OutcomeRateLimited, RetryAfterMS: tc.retryMS}, true
		}
		e := newEnv(t, fastConfig(), m, h, nil)
		res, err := e.run(t, "go")
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
		if res.Calls[0].Outcome != protocol.OutcomeRateLimited {
			t.Fatalf("outcome %q, want rate_limited", res.Calls[0].Outcome)
		}
		if got := observation(t, res, 0); got != tc.want {
			t.Errorf("retry %dms: observation %q, want %q", tc.retryMS, got, tc.want)
		}
	}
}
