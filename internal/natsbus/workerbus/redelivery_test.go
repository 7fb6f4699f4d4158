package workerbus_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
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

// gated returns a tool that counts its runs and answers "done" once
// release is closed (or fails when its context ends).
func gated(name string, runs *atomic.Int64, release <-chan struct{}, idempotent bool) harness.Tool {
	return harness.Tool{Name: name, Parameters: bustest.EmptyObject, Idempotent: idempotent,
		Run: func(ctx context.Context, _ json.RawMessage) (string, error) {
			runs.Add(1)
			select {
			case <-release:
				return "done", nil
			case <-ctx.Done():
				return "", ctx.Err()
			}
		}}
}

// TestAStalledWorkerDoesNotRunANonIdempotentCallTwice: a worker takes a
// non-idempotent call and stalls (its link freezes) before it can claim
// it; the server redelivers the call after the ack wait to another worker,
// which runs it. When the stalled worker comes back it must not run the
// call too — although the server would still confirm its ack.
func TestAStalledWorkerDoesNotRunANonIdempotentCallTwice(t *testing.T) {
	f := bustest.NewFleet(t)
	var runs atomic.Int64
	release := make(chan struct{})
	close(release)
	tool := func() *harness.Harness {
		return harnesstest.New(t, harness.Config{}, gated("charge", &runs, release, false))
	}
	l := newLink(t, f.Srv.ClientURL(), 0)
	// A long poll, so that the stalled worker's pull is still open in the
	// client when its link thaws.
	cfg := workerbus.WorkerConfig{Name: "stalled", Concurrency: 1, AckWait: 500 * time.Millisecond, PollWait: 9 * time.Second}
	stalled, _ := f.StartWorkerOn(t, l.connect(t), tool(), cfg)
	natstest.WaitFor(t, 10*time.Second, func() error {
		if info := f.ConsumerInfo(t, "charge"); info.NumWaiting == 0 {
			return errors.New("the worker has no pull open")
		}
		return nil
	})
	l.freeze()

	d, run, in := f.OpenRun(t)
	call := bustest.NewCall(run, "charge", `{}`, 30*time.Second)
	if err := d.Publish(bustest.Ctx(t), loop.Outgoing{Call: call}); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		if info := f.ConsumerInfo(t, "charge"); info.Delivered.Consumer == 0 {
			return errors.New("the server has not sent the call to the stalled worker")
		}
		return nil
	})
	f.StartWorker(t, tool(), workerbus.WorkerConfig{Name: "survivor", AckWait: cfg.AckWait})
	if r := bustest.NextResult(t, in, call.CallKey, 15*time.Second); r.Outcome != protocol.OutcomeOK || r.Worker != "survivor" {
		t.Fatalf("result = %+v, want ok from the survivor", r)
	}

	l.thaw()
	natstest.WaitFor(t, 15*time.Second, func() error {
		if runs.Load() > 1 || f.Log.Contains("call already claimed by another delivery") {
			return nil
		}
		return errors.New("the stalled worker has not handled its delivery")
	})
	if got := runs.Load(); got != 1 {
		t.Fatalf("the non-idempotent tool ran %d times, want once", got)
	}
	if st, _ := stalled.ToolStats("charge"); st.Delivered != 1 || st.Calls != 0 {
		t.Fatalf("stalled worker's stats %+v: want the call delivered and not run", st)
	}
	f.WaitIdle(t, "charge")
}

// TestARedeliveryToTheWorkerRunningTheCallDoesNotRunItAgain: the server
// redelivers an idempotent call (here: a negative ack; in life, heartbeats
// late by more than the ack wait) to the worker that is still running it.
// That worker does not start it a second time; the running attempt's ack
// settles the message.
func TestARedeliveryToTheWorkerRunningTheCallDoesNotRunItAgain(t *testing.T) {
	f := bustest.NewFleet(t)
	var runs atomic.Int64
	release := make(chan struct{})
	w, _ := f.StartWorker(t, harnesstest.New(t, harness.Config{}, gated("long", &runs, release, true)),
		workerbus.WorkerConfig{Concurrency: 4, Heartbeat: 50 * time.Millisecond})
	consumer, _ := f.Subjects.Consumer("long")
	acks, err := f.NC.SubscribeSync("$JS.ACK." + f.Subjects.CallsStream() + "." + consumer + ".>")
	if err != nil {
		t.Fatal(err)
	}
	d, run, in := f.OpenRun(t)
	call := bustest.NewCall(run, "long", `{}`, 30*time.Second)
	if err := d.Publish(bustest.Ctx(t), loop.Outgoing{Call: call}); err != nil {
		t.Fatal(err)
	}
	hb, err := acks.NextMsg(10 * time.Second) // the running attempt's first heartbeat
	if err != nil {
		t.Fatalf("no heartbeat: %v", err)
	}
	if !strings.HasPrefix(string(hb.Data), "+WPI") {
		t.Fatalf("first message on the ack subject %q, want a heartbeat", hb.Data)
	}
	if err := f.NC.Publish(hb.Subject, []byte("-NAK")); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		if st, _ := w.ToolStats("long"); st.Redelivered == 0 {
			return errors.New("the redelivery has not reached the worker")
		}
		return nil
	})
	close(release)
	if r := bustest.NextResult(t, in, call.CallKey, 10*time.Second); r.Outcome != protocol.OutcomeOK || r.Attempt != 1 {
		t.Fatalf("result = %+v, want ok from attempt 1", r)
	}
	f.WaitIdle(t, "long")
	if got := runs.Load(); got != 1 {
		t.Fatalf("tool ran %d times, want once", got)
	}
	if !f.Log.Contains("call redelivered while it runs here: not run again") {
		t.Error("the worker did not log the redelivery it did not run")
	}
}
