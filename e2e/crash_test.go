package e2e

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/internal/natstest"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// pickWorker returns the worker whose pid is ppid, and the other one.
func pickWorker(t *testing.T, ppid int, a, b *proc) (ran, other *proc) {
	t.Helper()
	switch ppid {
	case a.pid():
		return a, b
	case b.pid():
		return b, a
	}
	t.Fatalf("the tool's parent %d is neither worker (%d, %d)", ppid, a.pid(), b.pid())
	return nil, nil
}

// waitGone waits until the process pid has exited.
func waitGone(t *testing.T, pid int, timeout time.Duration, what string) {
	t.Helper()
	natstest.WaitFor(t, timeout, func() error {
		if processAlive(pid) {
			return fmt.Errorf("%s (pid %d) is still running", what, pid)
		}
		return nil
	})
}

// TestWorkerKilledMidIdempotentCall: the worker running an idempotent call
// is SIGKILLed. Its tool dies with it (long before its 3s sleep ends, and
// without writing its done line); the server redelivers the call after
// the ack wait to the other worker, which runs it to completion while
// heartbeating (the run is longer than the ack wait), and the model gets
// the survivor's output. The call ran exactly twice: once per worker.
func TestWorkerKilledMidIdempotentCall(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	w1, w2 := f.startWorker("w1"), f.startWorker("w2")
	coord := f.coordinator("coordinator", script{
		turn(call("c1", toolWork, map[string]any{"id": "job", "sleep_ms": 3000})),
		final("done"),
	}, "--tool-timeout", "20s")

	first := f.waitStarted("job", 1, 15*time.Second)[0]
	victim, survivor := pickWorker(t, first.ppid, w1, w2)
	victim.kill()
	waitGone(t, first.pid, time.Second, "the dead worker's tool")

	res := coord.result(30*time.Second, 0)
	recs, obs := answered(t, res)
	rec := recs["c1"]
	if rec.Outcome != protocol.OutcomeOK || rec.Worker != survivor.name || rec.Attempt < 2 {
		t.Fatalf("call = %+v, want ok from %s on attempt >= 2", rec, survivor.name)
	}
	if want := fmt.Sprintf("worker-pid %d", survivor.pid()); !strings.Contains(obs["c1"], want) {
		t.Fatalf("observation %q is not the survivor's output (%s)", obs["c1"], want)
	}
	runs := f.runsOf("job")
	if len(runs) != 2 {
		t.Fatalf("the call ran %d times, want 2 (the killed run and the redelivery): %+v", len(runs), runs)
	}
	if runs[0].done || !runs[1].done || runs[1].ppid != survivor.pid() {
		t.Fatalf("runs = %+v: want the first killed unfinished, the second finished on the survivor", runs)
	}
	f.waitDrained(toolWork, 5*time.Second)
}

// TestWorkerKilledMidNonIdempotentCall: the worker running a non-idempotent
// call is SIGKILLed while another worker stands by. The call was claimed
// (removed from the calls stream) before it started, so it is never
// delivered again; the coordinator saw it start and answers outcome_unknown
// at the deadline.
func TestWorkerKilledMidNonIdempotentCall(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	w1, w2 := f.startWorker("w1"), f.startWorker("w2")
	coord := f.coordinator("coordinator", script{
		turn(call("c1", toolCharge, map[string]any{"id": "pay", "sleep_ms": 10000})),
		final("done"),
	}, "--tool-timeout", "4s")

	first := f.waitStarted("pay", 1, 15*time.Second)[0]
	victim, _ := pickWorker(t, first.ppid, w1, w2)
	victim.kill()
	waitGone(t, first.pid, time.Second, "the dead worker's tool")

	res := coord.result(30*time.Second, 0)
	recs, obs := answered(t, res)
	if rec := recs["c1"]; rec.Outcome != protocol.OutcomeUnknown {
		t.Fatalf("call = %+v, want outcome_unknown", rec)
	}
	if !strings.Contains(obs["c1"], "may or may not have taken effect") {
		t.Fatalf("observation %q does not tell the model to check", obs["c1"])
	}
	// The run ended 4s after the call was published, well past the ack
	// wait: a redelivery would have happened by now.
	if runs := f.runsOf("pay"); len(runs) != 1 {
		t.Fatalf("the non-idempotent call ran %d times, want exactly once: %+v", len(runs), runs)
	}
	info := f.consumerInfo(toolCharge)
	if info.NumAckPending != 0 || info.NumPending != 0 || info.NumRedelivered != 0 || info.Delivered.Consumer != 1 {
		t.Fatalf("consumer of %s: %d unacknowledged, %d waiting, %d redelivered, %d deliveries; want 0, 0, 0, 1",
			toolCharge, info.NumAckPending, info.NumPending, info.NumRedelivered, info.Delivered.Consumer)
	}
}

// TestQueuedNonIdempotentCallIsWithdrawnAtItsDeadline: a worker with one
// slot takes the first of two non-idempotent calls and is then frozen
// (SIGSTOP) with the second still queued. At the deadline the coordinator
// withdraws the queued call, which no worker claimed, and tells the model
// it did not run; the claimed one cannot be withdrawn and is
// outcome_unknown. Thawed, the worker never receives the withdrawn call:
// the next call it is given is a later run's, and the withdrawn one never
// runs.
func TestQueuedNonIdempotentCallIsWithdrawnAtItsDeadline(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	w := f.startWorker("w1", "--concurrency", "1")
	coord := f.coordinator("coordinator", script{
		turn(call("c1", toolCharge, map[string]any{"id": "one", "sleep_ms": 20000}),
			call("c2", toolCharge, map[string]any{"id": "two", "sleep_ms": 0})),
		final("done"),
	}, "--tool-timeout", "3s")

	var first toolRun
	natstest.WaitFor(t, 15*time.Second, func() error {
		runs := f.runs()
		if len(runs) == 0 {
			return fmt.Errorf("no call has started")
		}
		first = runs[0]
		return nil
	})
	w.signal(syscall.SIGSTOP)
	frozen := true
	t.Cleanup(func() {
		if frozen {
			w.signal(syscall.SIGCONT)
		}
	})
	ran, queued := "c1", "c2"
	if first.id == "two" {
		ran, queued = "c2", "c1"
	}

	recs, obs := answered(t, coord.result(30*time.Second, 0))
	if rec := recs[queued]; rec.Outcome != protocol.OutcomeTimeout || !strings.Contains(obs[queued], "before any worker started it: it did not run") {
		t.Fatalf("queued call %+v %q: want timeout, told it did not run", rec, obs[queued])
	}
	if rec := recs[ran]; rec.Outcome != protocol.OutcomeUnknown {
		t.Fatalf("claimed call %+v: want outcome_unknown", rec)
	}
	coord.waitLog(time.Second, `"event":"call_withdrawn"`)

	w.signal(syscall.SIGCONT)
	frozen = false
	next := f.coordinator("next", script{
		turn(call("c3", toolCharge, map[string]any{"id": "three", "sleep_ms": 0})),
		final("done"),
	}, "--tool-timeout", "20s")
	recs, _ = answered(t, next.result(30*time.Second, 0))
	if rec := recs["c3"]; rec.Outcome != protocol.OutcomeOK {
		t.Fatalf("the next run's call %+v: want ok", rec)
	}
	if runs := f.runsOf(map[string]string{"c1": "one", "c2": "two"}[queued]); len(runs) != 0 {
		t.Fatalf("the withdrawn call ran %d times, want never: %+v", len(runs), runs)
	}
	// The calls stream delivers in order: had the withdrawn call still
	// been there, the thawed worker would have been given it first.
	if info := f.consumerInfo(toolCharge); info.Delivered.Consumer != 2 || info.NumPending != 0 {
		t.Fatalf("consumer of %s: %d deliveries, %d waiting; want 2 (the claimed call and the next run's) and 0",
			toolCharge, info.Delivered.Consumer, info.NumPending)
	}
}

// TestRedeliveryAfterTheDeadlineNeverStarts: a worker dies mid-call and the
// call's deadline (1s) passes before the ack wait (2s) redelivers it. The
// other worker terminates the redelivered call without running it, and the
// model gets timeout.
func TestRedeliveryAfterTheDeadlineNeverStarts(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	w1, w2 := f.startWorker("w1"), f.startWorker("w2")
	coord := f.coordinator("coordinator", script{
		turn(call("c1", toolWork, map[string]any{"id": "late", "sleep_ms": 5000})),
		final("done"),
	}, "--tool-timeout", "1s")

	first := f.waitStarted("late", 1, 15*time.Second)[0]
	victim, survivor := pickWorker(t, first.ppid, w1, w2)
	victim.kill()

	res := coord.result(30*time.Second, 0)
	recs, _ := answered(t, res)
	if rec := recs["c1"]; rec.Outcome != protocol.OutcomeTimeout {
		t.Fatalf("call = %+v, want timeout", rec)
	}
	survivor.waitLog(30*time.Second, "call expired before it started: not run")
	f.waitDrained(toolWork, 5*time.Second)
	if runs := f.runsOf("late"); len(runs) != 1 {
		t.Fatalf("the call ran %d times, want once (the redelivery must not start): %+v", len(runs), runs)
	}
}

// TestStaleAttemptCannotOverwriteTheAnswer: the worker running a call is
// frozen (SIGSTOP) until the call is redelivered and answered by the other
// worker; then it resumes and publishes its own, stale result while the
// coordinator is still gathering the next round. The results stream stores
// one result per call (the stale one is a duplicate of its Nats-Msg-Id), so
// the coordinator, which reads results from the stream, never sees it, and
// the model keeps the answer it got first. (A duplicate that did reach the
// loop would be dropped there too: pkg/loop's tests cover that.)
func TestStaleAttemptCannotOverwriteTheAnswer(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	w1, w2 := f.startWorker("w1"), f.startWorker("w2")
	results, err := f.nc.SubscribeSync(protocol.Subjects{}.Results())
	if err != nil {
		t.Fatal(err)
	}
	coord := f.coordinator("coordinator", script{
		turn(call("c1", toolWork, map[string]any{"id": "x", "sleep_ms": 1200})),
		// The second round is still gathering when the stale result comes.
		turn(call("c2", toolWork, map[string]any{"id": "y", "sleep_ms": 2500})),
		final("done"),
	}, "--tool-timeout", "20s")

	first := f.waitStarted("x", 1, 15*time.Second)[0]
	victim, survivor := pickWorker(t, first.ppid, w1, w2)
	victim.signal(syscall.SIGSTOP)
	stopped := true
	t.Cleanup(func() {
		if stopped {
			victim.signal(syscall.SIGCONT)
		}
	})

	// Wait for the survivor's answer to reach the server, then thaw the
	// victim: its result is published after the survivor's.
	good := nextResult(t, results, 15*time.Second, func(r protocol.Result) bool { return r.Worker == survivor.name })
	victim.signal(syscall.SIGCONT)
	stopped = false
	stale := nextResult(t, results, 15*time.Second, func(r protocol.Result) bool {
		return r.Worker == victim.name && r.CallKey == good.CallKey
	})
	if stale.Attempt >= good.Attempt {
		t.Fatalf("stale attempt %d, good attempt %d", stale.Attempt, good.Attempt)
	}

	res := coord.result(30*time.Second, 0)
	recs, obs := answered(t, res)
	rec := recs["c1"]
	if rec.Outcome != protocol.OutcomeOK || rec.Worker != survivor.name || rec.Attempt != good.Attempt {
		t.Fatalf("call = %+v, want the first answer: ok from %s, attempt %d", rec, survivor.name, good.Attempt)
	}
	if want := fmt.Sprintf("worker-pid %d", survivor.pid()); !strings.Contains(obs["c1"], want) {
		t.Fatalf("observation %q is not the survivor's output (%s)", obs["c1"], want)
	}
	if recs["c2"].Outcome != protocol.OutcomeOK {
		t.Fatalf("second round call = %+v, want ok", recs["c2"])
	}
	if n := storedResults(t, f, res.RunID, rec.CallKey); n != 1 {
		t.Fatalf("results stream holds %d results for the call, want 1", n)
	}
}
