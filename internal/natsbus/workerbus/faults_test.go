package workerbus_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/internal/natsbus/bustest"
	"github.com/toolfleet/toolfleet/internal/natsbus/workerbus"
	"github.com/toolfleet/toolfleet/internal/natstest"
	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/harness/harnesstest"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// firstHangs returns a tool whose first run waits for its context to end
// and whose later runs answer "done" at once.
func firstHangs(name string, runs *atomic.Int64, idempotent bool) harness.Tool {
	return harness.Tool{Name: name, Parameters: bustest.EmptyObject, Idempotent: idempotent,
		Run: func(ctx context.Context, _ json.RawMessage) (string, error) {
			if runs.Add(1) == 1 {
				<-ctx.Done()
				return "", ctx.Err()
			}
			return "done", nil
		}}
}

// TestDeadWorkersCallsAreRedelivered: an idempotent call whose worker
// vanishes mid-run is redelivered to another worker after AckWait; a
// non-idempotent one is never run twice.
func TestDeadWorkersCallsAreRedelivered(t *testing.T) {
	t.Parallel() // its own server; it waits on the fleet, not the CPU
	tests := []struct {
		name       string
		idempotent bool
	}{
		{"idempotent runs again elsewhere", true},
		{"non-idempotent is not run again", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := bustest.NewFleet(t)
			var runs atomic.Int64
			tool := firstHangs("job", &runs, tc.idempotent)
			cfg := workerbus.WorkerConfig{AckWait: 300 * time.Millisecond, ShutdownGrace: 100 * time.Millisecond}
			cfg.Name = "doomed"
			_, _, doomedConn := f.StartWorkerConn(t, harnesstest.New(t, harness.Config{}, tool), cfg)

			d, run, in := f.OpenRun(t)
			call := bustest.NewCall(run, "job", `{}`, 20*time.Second)
			if err := d.Publish(bustest.Ctx(t), loop.Outgoing{Call: call, StartedNotices: true}); err != nil {
				t.Fatal(err)
			}
			bustest.NextProgress(t, in, call.CallKey, 10*time.Second)
			doomedConn.Close() // the worker's process dies: no heartbeat, no result

			cfg.Name = "survivor"
			survivor, _ := f.StartWorker(t, harnesstest.New(t, harness.Config{}, tool), cfg)
			if tc.idempotent {
				r := bustest.NextResult(t, in, call.CallKey, 10*time.Second)
				if r.Outcome != protocol.OutcomeOK || r.Worker != "survivor" || r.Attempt != 2 {
					t.Fatalf("result = %+v, want ok from survivor on attempt 2", r)
				}
				return
			}
			// At most once: the call was acked before it ran, so it has left
			// the work queue and no redelivery is possible.
			f.WaitIdle(t, "job")
			if got := bustest.Events(t, survivor).Started(); got != 0 {
				t.Fatalf("survivor executed %d calls, want 0 (the non-idempotent call must not run twice)", got)
			}
			if got := runs.Load(); got != 1 {
				t.Fatalf("tool ran %d times, want 1", got)
			}
			if info := f.ConsumerInfo(t, "job"); info.Delivered.Consumer != 1 {
				t.Fatalf("consumer delivered the call %d times, want 1", info.Delivered.Consumer)
			}
		})
	}
}

func TestWorkerSurvivesAServerRestart(t *testing.T) {
	t.Parallel() // its own server; it waits on the fleet, not the CPU
	f := bustest.NewFleet(t)
	h := harnesstest.New(t, harness.Config{}, harness.Echo())
	f.StartWorker(t, h, workerbus.WorkerConfig{})
	d, run, in := f.OpenRun(t)

	f.Srv = natstest.Restart(t, f.Srv)
	// Publish until the dispatcher's connection is back; then the worker
	// must answer over its own reconnected connection.
	call := bustest.NewCall(run, "echo", `{"text":"after restart"}`, 20*time.Second)
	natstest.WaitFor(t, 10*time.Second, func() error { return d.Publish(bustest.Ctx(t), loop.Outgoing{Call: call}) })
	if r := bustest.NextResult(t, in, call.CallKey, 15*time.Second); r.Output != "after restart" {
		t.Fatalf("result = %+v", r)
	}
}

// TestMoreToolsThanSlots: a worker with one slot serving two tools still
// serves both (each pull gives its slot back after PollWait).
func TestMoreToolsThanSlots(t *testing.T) {
	f := bustest.NewFleet(t)
	h := harnesstest.New(t, harness.Config{}, harness.Echo(), harnesstest.Static("static", "s"))
	w, _ := f.StartWorker(t, h, workerbus.WorkerConfig{Concurrency: 1, PollWait: 100 * time.Millisecond})
	d, run, in := f.OpenRun(t)
	for i := range 6 {
		tool, args := protocol.ToolName("echo"), `{"text":"e"}`
		if i%2 == 1 {
			tool, args = "static", `{}`
		}
		call := bustest.NewCall(run, tool, args, 20*time.Second)
		if err := d.Publish(bustest.Ctx(t), loop.Outgoing{Call: call}); err != nil {
			t.Fatal(err)
		}
		if r := bustest.NextResult(t, in, call.CallKey, 5*time.Second); r.Outcome != protocol.OutcomeOK {
			t.Fatalf("call %d to %s: %+v", i, tool, r)
		}
	}
	if got := bustest.Events(t, w).Started(); got != 6 {
		t.Fatalf("Executed = %d, want 6", got)
	}
}
