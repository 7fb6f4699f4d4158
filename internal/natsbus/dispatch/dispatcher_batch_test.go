package dispatch_test

import (
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/internal/natsbus/bustest"
	"github.com/toolfleet/toolfleet/internal/natsbus/workerbus"
	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/harness/harnesstest"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// TestPublishBatch publishes a round as one batch with an invalid call in
// it: the invalid call gets its own error and the others are stored once
// each (a second publish of the same batch is deduplicated) and answered
// once each.
func TestPublishBatch(t *testing.T) {
	f := bustest.NewFleet(t)
	h := harnesstest.New(t, harness.Config{}, harness.Echo())
	f.StartWorker(t, h, workerbus.WorkerConfig{Name: "w1"})
	f.WaitConsumers(t, h)
	d, run, in := f.OpenRun(t)

	const n = 9
	calls := make([]loop.Outgoing, n)
	for i := range calls {
		calls[i] = loop.Outgoing{Call: bustest.NewCall(run, "echo", `{"text":"hello"}`, time.Minute)}
	}
	calls[4].Call.Tool = "" // invalid: refused before it is published
	for range 2 {
		errs := d.PublishBatch(bustest.Ctx(t), calls)
		if len(errs) != n {
			t.Fatalf("PublishBatch returned %d errors, want %d", len(errs), n)
		}
		for i, err := range errs {
			if (err != nil) != (i == 4) {
				t.Fatalf("call %d: error %v", i, err)
			}
		}
	}
	want := map[protocol.CallKey]bool{}
	for i, c := range calls {
		if i != 4 {
			want[c.Call.CallKey] = true
		}
	}
	for len(want) > 0 {
		ev := bustest.NextEvent(t, in, 30*time.Second, func(ev loop.Event) bool { return ev.Result != nil })
		r := ev.Result
		if !want[r.CallKey] {
			t.Fatalf("a result for %s: not a call of the batch, or answered twice", r.CallKey)
		}
		delete(want, r.CallKey)
		if r.Outcome != protocol.OutcomeOK || r.Output != "hello" {
			t.Fatalf("call %s answered %s %q", r.CallKey, r.Outcome, r.Output)
		}
	}
	f.WaitIdle(t, "echo")
	if info := f.ConsumerInfo(t, "echo"); info.Delivered.Consumer != n-1 {
		t.Fatalf("the workers' consumer delivered %d calls, want %d: the second batch was not deduplicated", info.Delivered.Consumer, n-1)
	}
}
