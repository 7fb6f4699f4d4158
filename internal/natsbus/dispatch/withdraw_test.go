package dispatch_test

import (
	"fmt"
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

// TestWithdrawTakesBackUnclaimedCalls: calls no worker has claimed are
// withdrawn — a batch's and a lone publish's — and leave the calls
// stream, so a worker that starts afterwards never runs them; it runs the
// next call, which nobody withdrew.
func TestWithdrawTakesBackUnclaimedCalls(t *testing.T) {
	f := bustest.NewFleet(t)
	d, run, in := f.OpenRun(t)
	wi := bustest.Withdrawer(t, in)
	a, b, c := bustest.NewCall(run, "charge", `{}`, 30*time.Second), bustest.NewCall(run, "charge", `{}`, 30*time.Second), bustest.NewCall(run, "charge", `{}`, 30*time.Second)
	// As the loop publishes a non-idempotent call.
	for i, err := range d.PublishBatch(bustest.Ctx(t), []loop.Outgoing{{Call: a, AtMostOnce: true}, {Call: b, AtMostOnce: true}}) {
		if err != nil {
			t.Fatalf("PublishBatch: call %d: %v", i, err)
		}
	}
	if err := d.Publish(bustest.Ctx(t), loop.Outgoing{Call: c, AtMostOnce: true}); err != nil {
		t.Fatal(err)
	}
	for _, call := range []protocol.Call{a, b, c} {
		if ok, err := wi.Withdraw(bustest.Ctx(t), call.CallKey); !ok || err != nil {
			t.Fatalf("Withdraw(%s) = %v, %v; want true, nil", call.CallKey, ok, err)
		}
	}
	st, err := f.JS.Stream(bustest.Ctx(t), f.Subjects.CallsStream())
	if err != nil {
		t.Fatal(err)
	}
	if info, err := st.Info(bustest.Ctx(t)); err != nil || info.State.Msgs != 0 {
		t.Fatalf("calls stream after the withdrawals: %+v, %v; want no message", info.State, err)
	}
	if _, err := wi.Withdraw(bustest.Ctx(t), protocol.NewCallKey()); err == nil {
		t.Fatal("Withdraw of a call never published: no error, want one (it cannot tell)")
	}
	idem := bustest.NewCall(run, "other", `{}`, 30*time.Second) // no worker serves it
	if err := d.Publish(bustest.Ctx(t), loop.Outgoing{Call: idem}); err != nil {
		t.Fatal(err)
	}
	if _, err := wi.Withdraw(bustest.Ctx(t), idem.CallKey); err == nil {
		t.Fatal("Withdraw of a call not published at most once: no error, want one (the loop never asks)")
	}

	var runs atomic.Int64
	f.StartWorker(t, harnesstest.New(t, harness.Config{}, bustest.Counting("charge", &runs, 0, false)), workerbus.WorkerConfig{Name: "w1"})
	next := bustest.NewCall(run, "charge", `{}`, 30*time.Second)
	if err := d.Publish(bustest.Ctx(t), loop.Outgoing{Call: next}); err != nil {
		t.Fatal(err)
	}
	if r := bustest.NextResult(t, in, next.CallKey, 15*time.Second); r.Outcome != protocol.OutcomeOK {
		t.Fatalf("next call: %+v, want ok", r)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("the tool ran %d times, want once: the withdrawn calls must never run", n)
	}
	if info := f.ConsumerInfo(t, "charge"); info.Delivered.Consumer != 1 {
		t.Fatalf("the worker was delivered %d calls, want only the one not withdrawn", info.Delivered.Consumer)
	}
}

// TestWithdrawFindsAClaimedCall: a non-idempotent call a worker claimed
// and is running cannot be withdrawn: Withdraw says so (it may have run),
// and the call still runs once and is answered. That holds for a stale
// worker too, whose manifest says the tool is idempotent while its
// coordinator's catalog says it is not: the call is marked
// loop.WithAtMostOnce, so the worker claims it before it runs, and a
// withdrawal at the deadline never reports a running call as not run.
func TestWithdrawFindsAClaimedCall(t *testing.T) {
	t.Parallel() // its own server; it waits on the fleet, not the CPU
	for _, tt := range []struct {
		name          string
		staleManifest bool // the worker's manifest says idempotent
	}{
		{name: "non-idempotent worker"},
		{name: "stale worker", staleManifest: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := bustest.NewFleet(t)
			var runs atomic.Int64
			f.StartWorker(t, harnesstest.New(t, harness.Config{}, bustest.Counting("charge", &runs, time.Second, tt.staleManifest)), workerbus.WorkerConfig{Name: "w1"})
			d, run, in := f.OpenRun(t)
			call := bustest.NewCall(run, "charge", `{}`, 30*time.Second)
			if err := d.Publish(bustest.Ctx(t), loop.Outgoing{Call: call, AtMostOnce: true}); err != nil {
				t.Fatal(err)
			}
			natstest.WaitFor(t, 10*time.Second, func() error {
				if runs.Load() == 0 {
					return fmt.Errorf("the call has not started")
				}
				return nil
			})
			if ok, err := bustest.Withdrawer(t, in).Withdraw(bustest.Ctx(t), call.CallKey); ok || err != nil {
				t.Fatalf("Withdraw of a running call = %v, %v; want false, nil (claimed)", ok, err)
			}
			if r := bustest.NextResult(t, in, call.CallKey, 15*time.Second); r.Outcome != protocol.OutcomeOK {
				t.Fatalf("result %+v, want ok", r)
			}
			if n := runs.Load(); n != 1 {
				t.Fatalf("the tool ran %d times, want once", n)
			}
		})
	}
}

// TestExpiredNonIdempotentCallIsAnsweredNotRun: a non-idempotent call
// delivered past its deadline is claimed, so that it never runs, and
// answered timeout by the worker: its coordinator learns that it did not
// start, where it would otherwise find it gone and answer
// outcome_unknown.
func TestExpiredNonIdempotentCallIsAnsweredNotRun(t *testing.T) {
	f := bustest.NewFleet(t)
	d, run, in := f.OpenRun(t)
	call := bustest.NewCall(run, "charge", `{}`, 200*time.Millisecond)
	if err := d.Publish(bustest.Ctx(t), loop.Outgoing{Call: call, AtMostOnce: true}); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 5*time.Second, func() error {
		if time.Now().Before(call.Deadline) {
			return fmt.Errorf("the call's deadline has not passed")
		}
		return nil
	})
	var runs atomic.Int64
	f.StartWorker(t, harnesstest.New(t, harness.Config{}, bustest.Counting("charge", &runs, 0, false)), workerbus.WorkerConfig{Name: "w1"})
	r := bustest.NextResult(t, in, call.CallKey, 15*time.Second)
	if r.Outcome != protocol.OutcomeTimeout || r.ErrorType != "expired" || r.Worker != "w1" {
		t.Fatalf("result %+v, want timeout (expired) from w1", r)
	}
	if n := runs.Load(); n != 0 {
		t.Fatalf("the expired call ran %d times, want never", n)
	}
	if ok, err := bustest.Withdrawer(t, in).Withdraw(bustest.Ctx(t), call.CallKey); ok || err != nil {
		t.Fatalf("Withdraw after the worker claimed it = %v, %v; want false, nil", ok, err)
	}
	f.WaitIdle(t, "charge")
}
