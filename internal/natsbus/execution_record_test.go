package natsbus_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/harness/harnesstest"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// TestUnwrittenRecordIsNotAMissingApproval: a validly approved call whose
// execution record the worker cannot write (its claims stream is gone)
// does not run, and its result says so (loop.ErrorTypeRecordUnwritten),
// not that the approval was missing or forged.
func TestUnwrittenRecordIsNotAMissingApproval(t *testing.T) {
	f := newFleet(t)
	var runs atomic.Int64
	deploy := harness.Tool{
		Name: "deploy", Parameters: json.RawMessage(`{"type":"object"}`), RequiresApproval: true,
		Run: func(context.Context, json.RawMessage) (string, error) { runs.Add(1); return "deployed", nil },
	}
	h := harnesstest.New(t, harness.Config{}, deploy)
	f.startWorker(t, h, natsbus.WorkerConfig{Name: "w1"})
	d, run, in := f.openRun(t)
	if err := f.js.DeleteStream(ctx(t), f.subjects.ClaimsStream()); err != nil {
		t.Fatal(err)
	}
	c := newCall(run, "deploy", `{"env":"prod"}`, 10*time.Second)
	r, ds := f.storeApproval(t, c, time.Now().Add(time.Minute), "approve")
	c.Approval = &protocol.ApprovalProof{RequestSeq: r, DecisionSeq: ds[0]}
	if err := d.Publish(ctx(t), loop.Outgoing{Call: c}); err != nil {
		t.Fatal(err)
	}
	res := nextResult(t, in, c.CallKey, 10*time.Second)
	if res.Outcome != protocol.OutcomeDenied || res.ErrorType != loop.ErrorTypeRecordUnwritten || runs.Load() != 0 {
		t.Fatalf("result %+v, %d runs: want denied with error type %s, not run", res, runs.Load(), loop.ErrorTypeRecordUnwritten)
	}
	if !f.log.Contains("its execution record could not be written") {
		t.Errorf("no warning naming the unwritten record; logs:\n%s", f.log.String())
	}
}
