package admission_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/internal/natsbus/admission"
	"github.com/toolfleet/toolfleet/internal/natsbus/bustest"
	"github.com/toolfleet/toolfleet/internal/natsbus/workerbus"
	"github.com/toolfleet/toolfleet/internal/natstest"
	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// A paused tool stays paused across worker restarts, also when the
// restarted worker has other consumer settings; calls published while it
// is paused wait and run once it is resumed; each pause and resume is in
// the audit log.
func TestToolPauseSurvivesWorkerRestart(t *testing.T) {
	f := bustest.NewFleet(t)
	h, err := harness.New(harness.Config{}, harness.Echo())
	if err != nil {
		t.Fatal(err)
	}
	traffic := admission.NewToolTraffic(f.JS, f.Subjects)
	if _, err := traffic.PauseState(bustest.Ctx(t), "echo"); !errors.Is(err, admission.ErrNoToolConsumer) {
		t.Fatalf("PauseState before any worker: %v, want ErrNoToolConsumer", err)
	}
	_, stop := f.StartWorker(t, h, workerbus.WorkerConfig{})

	until := time.Now().Add(time.Hour)
	p, err := traffic.Pause(bustest.Ctx(t), protocol.TrafficNote{Tool: "echo", Until: &until, By: "ann", Reason: "bad deploy"})
	if err != nil || !p.Paused {
		t.Fatalf("Pause: %+v, %v", p, err)
	}
	stop()
	// Restarted, and with another ack wait: an update, which keeps the pause.
	f.StartWorker(t, h, workerbus.WorkerConfig{AckWait: 3 * time.Second})
	natstest.WaitFor(t, 10*time.Second, func() error {
		if info := f.ConsumerInfo(t, "echo"); info.Config.AckWait != 3*time.Second {
			return errors.New("the restarted worker has not updated the consumer")
		}
		return nil
	})
	if info := f.ConsumerInfo(t, "echo"); !info.Paused {
		t.Fatal("the restarted worker lifted the pause")
	}

	d, run, in := f.OpenRun(t)
	call := bustest.NewCall(run, "echo", `{"text":"hi"}`, 30*time.Second)
	if err := d.Publish(bustest.Ctx(t), loop.Outgoing{Call: call}); err != nil {
		t.Fatal(err)
	}
	// Not a timing assertion: the call is still stored once every worker
	// pulled at least once (the consumer has waiting pulls) while paused.
	// The server counts a stored message into a consumer's pending
	// asynchronously, after the publish is acknowledged: wait for the
	// count, then check the call was never delivered.
	waitWaitingPulls(t, f)
	natstest.WaitFor(t, 10*time.Second, func() error {
		if info := f.ConsumerInfo(t, "echo"); info.NumPending != 1 || info.NumAckPending != 0 || info.Delivered.Consumer != 0 {
			return fmt.Errorf("while paused: pending %d, ack pending %d, delivered %d; want 1, 0, 0",
				info.NumPending, info.NumAckPending, info.Delivered.Consumer)
		}
		return nil
	})
	if err := traffic.Resume(bustest.Ctx(t), protocol.TrafficNote{Tool: "echo", By: "ann", Reason: "fixed"}); err != nil {
		t.Fatalf("Resume: %v", err)
	}
	if res := bustest.NextResult(t, in, call.CallKey, 20*time.Second); res.Outcome != protocol.OutcomeOK {
		t.Fatalf("after the resume: %+v", res)
	}
	hist, err := traffic.History(bustest.Ctx(t), "echo", 10)
	if err != nil || len(hist) != 2 {
		t.Fatalf("History: %+v, %v; want 2 records", hist, err)
	}
	if n := hist[0].Note; n.Action != protocol.TrafficPause || n.By != "ann" || n.Reason != "bad deploy" || n.Until == nil {
		t.Fatalf("pause record %+v", n)
	}
	if n := hist[1].Note; n.Action != protocol.TrafficResume || n.Reason != "fixed" {
		t.Fatalf("resume record %+v", n)
	}
}

// waitWaitingPulls waits until echo's consumer has a pull waiting.
func waitWaitingPulls(t *testing.T, f *bustest.Fleet) {
	t.Helper()
	natstest.WaitFor(t, 10*time.Second, func() error {
		if info := f.ConsumerInfo(t, "echo"); info.NumWaiting == 0 {
			return errors.New("no pull waiting")
		}
		return nil
	})
}

// An operator's limit reaches a running worker: with at most one call per
// 1000s, a call beyond the first is answered rate_limited (with the time
// to try again) and does not run; lifting the limit (rate 0) lets calls
// run again. Each change is in the audit log.
func TestOperatorRateLimitReachesWorkers(t *testing.T) {
	t.Parallel() // its own server; it waits on the fleet, not the CPU
	f := bustest.NewFleet(t)
	h, err := harness.New(harness.Config{}, harness.Echo())
	if err != nil {
		t.Fatal(err)
	}
	w, _ := f.StartWorker(t, h, workerbus.WorkerConfig{})
	traffic := admission.NewToolTraffic(f.JS, f.Subjects)
	if err := traffic.SetLimit(bustest.Ctx(t), protocol.TrafficNote{Tool: "echo", Rate: 0.001, Burst: 1, By: "ann", Reason: "quota"}); err != nil {
		t.Fatalf("SetLimit: %v", err)
	}
	d, run, in := f.OpenRun(t)
	call := func() protocol.Result {
		c := bustest.NewCall(run, "echo", `{"text":"hi"}`, 30*time.Second)
		if err := d.Publish(bustest.Ctx(t), loop.Outgoing{Call: c}); err != nil {
			t.Fatal(err)
		}
		return bustest.NextResult(t, in, c.CallKey, 20*time.Second)
	}
	// The worker reads the limit within a few seconds: until then calls run.
	var limited protocol.Result
	natstest.WaitFor(t, 20*time.Second, func() error {
		if limited = call(); limited.Outcome != protocol.OutcomeRateLimited {
			return errors.New("not limited yet")
		}
		return nil
	})
	if limited.RetryAfterMS <= 0 || limited.Output != "" {
		t.Fatalf("rate_limited result %+v, want a time to try again and no output", limited)
	}
	executed := bustest.Events(t, w).Started()
	if r := call(); r.Outcome != protocol.OutcomeRateLimited || bustest.Events(t, w).Started() != executed {
		t.Fatalf("a second call over the limit: %+v (executed %d → %d)", r, executed, bustest.Events(t, w).Started())
	}
	if err := traffic.SetLimit(bustest.Ctx(t), protocol.TrafficNote{Tool: "echo", Rate: 0, By: "ann", Reason: "lifted"}); err != nil {
		t.Fatalf("SetLimit 0: %v", err)
	}
	natstest.WaitFor(t, 20*time.Second, func() error {
		if r := call(); r.Outcome != protocol.OutcomeOK {
			return errors.New("still limited")
		}
		return nil
	})
	hist, err := traffic.History(bustest.Ctx(t), "echo", 10)
	if err != nil || len(hist) != 2 || hist[0].Note.Action != protocol.TrafficLimit || hist[0].Note.Rate != 0.001 || hist[1].Note.Rate != 0 {
		t.Fatalf("History: %+v, %v", hist, err)
	}
	// A limit keeps the newest records ("tools history --limit 1": the last change).
	if hist, err := traffic.History(bustest.Ctx(t), "echo", 1); err != nil || len(hist) != 1 || hist[0].Note.Rate != 0 || hist[0].Note.Reason != "lifted" {
		t.Fatalf("History limit 1: %+v, %v, want the newest record only", hist, err)
	}
}
