package workerbus_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/internal/natsbus/bustest"
	"github.com/toolfleet/toolfleet/internal/natsbus/workerbus"
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
	f := bustest.NewFleet(t)
	var runs atomic.Int64
	deploy := harness.Tool{
		Name: "deploy", Parameters: json.RawMessage(`{"type":"object"}`), RequiresApproval: true,
		Run: func(context.Context, json.RawMessage) (string, error) { runs.Add(1); return "deployed", nil },
	}
	h := harnesstest.New(t, harness.Config{}, deploy)
	f.StartWorker(t, h, workerbus.WorkerConfig{Name: "w1"})
	d, run, in := f.OpenRun(t)
	if err := f.JS.DeleteStream(bustest.Ctx(t), f.Subjects.ClaimsStream()); err != nil {
		t.Fatal(err)
	}
	c := bustest.NewCall(run, "deploy", `{"env":"prod"}`, 10*time.Second)
	r, ds := f.StoreApproval(t, c, time.Now().Add(time.Minute), "approve")
	c.Approval = &protocol.ApprovalProof{RequestSeq: r, DecisionSeq: ds[0]}
	if err := d.Publish(bustest.Ctx(t), loop.Outgoing{Call: c}); err != nil {
		t.Fatal(err)
	}
	res := bustest.NextResult(t, in, c.CallKey, 10*time.Second)
	if res.Outcome != protocol.OutcomeDenied || res.ErrorType != loop.ErrorTypeRecordUnwritten || runs.Load() != 0 {
		t.Fatalf("result %+v, %d runs: want denied with error type %s, not run", res, runs.Load(), loop.ErrorTypeRecordUnwritten)
	}
	if !f.Log.Contains("its execution record could not be written") {
		t.Errorf("no warning naming the unwritten record; logs:\n%s", f.Log.String())
	}
}
