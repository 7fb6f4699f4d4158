package e2e

import (
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/internal/natstest"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// TestServerRestartMidRun: the nats-server is restarted (same port, same
// store) while a call runs. Coordinator and workers reconnect, the running
// call's result gets through, the next round runs normally, and every id is
// answered ok.
func TestServerRestartMidRun(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	w1, w2 := f.startWorker("w1"), f.startWorker("w2")
	coord := f.coordinator("coordinator", script{
		turn(call("c1", toolWork, map[string]any{"id": "a", "sleep_ms": 2000})),
		turn(
			call("c2", toolWork, map[string]any{"id": "b"}),
			call("c3", toolCharge, map[string]any{"id": "c"}),
		),
		final("done"),
	}, "--tool-timeout", "20s")

	f.waitStarted("a", 1, 15*time.Second)
	f.srv = natstest.Restart(t, f.srv)

	res := coord.result(40*time.Second, 0)
	recs, _ := answered(t, res)
	for _, id := range []string{"c1", "c2", "c3"} {
		if recs[id].Outcome != protocol.OutcomeOK {
			t.Errorf("%s = %+v, want ok", id, recs[id])
		}
	}
	if n := len(f.runsOf("c")); n != 1 {
		t.Errorf("the non-idempotent call ran %d times, want 1", n)
	}
	for _, p := range []*proc{coord, w1, w2} {
		if !strings.Contains(p.log(), "reconnected to NATS") {
			t.Errorf("%s did not log its reconnection", p.name)
		}
	}
	f.waitDrained(toolWork, 10*time.Second)
	f.waitDrained(toolCharge, 10*time.Second)
	// Stop the workers before the restarted server, which is cleaned up
	// first.
	w1.stop(10 * time.Second)
	w2.stop(10 * time.Second)
}

// TestCoordinatorInterrupted: SIGINT or SIGTERM reaches the coordinator while
// three calls run. It prints the partial result — termination_reason
// cancelled, every id answered cancelled — and exits 1; the workers get the
// cancels and kill the tools, which never finish, and nothing is left to
// redeliver.
func TestCoordinatorInterrupted(t *testing.T) {
	t.Parallel()
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			f := newFleet(t)
			w := f.startWorker("w1")
			coord := f.coordinator("coordinator", script{
				turn(
					call("c1", toolWork, map[string]any{"id": "s1", "sleep_ms": 20000}),
					call("c2", toolCharge, map[string]any{"id": "s2", "sleep_ms": 20000}),
					call("c3", toolWork, map[string]any{"id": "s3", "sleep_ms": 20000}),
				),
				final("done"),
			}, "--tool-timeout", "30s")
			var runs []toolRun
			for _, id := range []string{"s1", "s2", "s3"} {
				runs = append(runs, f.waitStarted(id, 1, 15*time.Second)[0])
			}
			coord.signal(sig)

			res := coord.result(10*time.Second, 1)
			if res.TerminationReason != "cancelled" {
				t.Fatalf("termination_reason = %q, want cancelled", res.TerminationReason)
			}
			recs, _ := answered(t, res)
			for _, id := range []string{"c1", "c2", "c3"} {
				if recs[id].Outcome != protocol.OutcomeCancelled {
					t.Errorf("%s = %+v, want cancelled", id, recs[id])
				}
			}
			for _, r := range runs {
				waitGone(t, r.pid, 5*time.Second, "tool "+r.id)
			}
			for _, r := range f.runs() {
				if r.done {
					t.Errorf("tool %s finished: its cancel did not reach the worker", r.id)
				}
			}
			w.waitLog(5*time.Second, "cancel requested")
			if n := len(w.logLines(func(m map[string]any) bool { return m["message"] == "cancel requested" })); n != 3 {
				t.Errorf("worker logged %d cancels, want 3", n)
			}
			f.waitDrained(toolWork, 5*time.Second)
			f.waitDrained(toolCharge, 5*time.Second)
		})
	}
}

// TestToolWithoutWorkers: the catalog lists a tool whose only worker has
// stopped. Its call ends timeout at its deadline and the run goes on to its
// answer. When a worker for the tool comes back later, it finds the stale
// call and discards it unrun.
func TestToolWithoutWorkers(t *testing.T) {
	// Not parallel: it bounds when the timeout is answered.
	f := newFleet(t)
	gone := f.startWorker("gone")
	gone.stop(10 * time.Second)
	if code := gone.wait(time.Second); code != 0 {
		t.Fatalf("worker exited %d after SIGTERM, want 0", code)
	}

	const timeout = time.Second
	start := time.Now()
	coord := f.coordinator("coordinator", script{
		turn(call("c1", toolWork, map[string]any{"id": "ghost"})),
		final("done"),
	}, "--tool-timeout", timeout.String())
	res := coord.result(20*time.Second, 0)
	elapsed := time.Since(start)
	recs, obs := answered(t, res)
	rec := recs["c1"]
	if rec.Outcome != protocol.OutcomeTimeout {
		t.Fatalf("call = %+v, want timeout", rec)
	}
	if want := "Tool 'work' timed out after 1s"; obs["c1"] != want {
		t.Fatalf("observation %q, want %q", obs["c1"], want)
	}
	// The deadline plus the loop's 500ms grace, and some slack for a loaded
	// machine; never the 30s of the tool's own timeout.
	if d := time.Duration(rec.DurationMS) * time.Millisecond; d < timeout || d > timeout+2*time.Second {
		t.Fatalf("the call was answered after %v, want about %v", d, timeout)
	}
	if res.TerminationReason != "natural" || elapsed > 15*time.Second {
		t.Fatalf("run ended %q after %v", res.TerminationReason, elapsed)
	}

	back := f.startWorker("back")
	back.waitLog(10*time.Second, "call expired before it started: not run")
	f.waitDrained(toolWork, 5*time.Second)
	if runs := f.runs(); len(runs) != 0 {
		t.Fatalf("the stale call ran: %+v", runs)
	}
}

// TestWorkerStopsPromptlyWhileServerIsDown: a worker told to stop (SIGTERM)
// while the nats-server is unreachable exits 0 within a few seconds; it does
// not hold its shutdown waiting for a server that is gone.
func TestWorkerStopsPromptlyWhileServerIsDown(t *testing.T) {
	// Not parallel: it bounds how long the stop takes.
	f := newFleet(t)
	w := f.startWorker("w1")
	f.srv.Shutdown()
	w.waitLog(10*time.Second, "disconnected from NATS")
	start := time.Now()
	w.signal(syscall.SIGTERM)
	if code := w.wait(15 * time.Second); code != 0 {
		t.Fatalf("worker exited %d, want 0", code)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("worker took %v to stop, want a few seconds at most", d)
	}
}

// TestWorkerDrainsOnSIGTERM: a worker told to stop (a rolling deploy)
// while it runs a call stops taking calls, finishes the call within its
// shutdown grace, answers it and exits 0; the next round's call goes to the
// worker that replaced it. Nothing runs twice. (The ack wait is 10s: the
// stopping worker heartbeats its call, and a loaded machine that stalls it
// for the suite's 2s would hand the call to the new worker.)
func TestWorkerDrainsOnSIGTERM(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	old := f.startWorker("old", "--ack-wait", "10s")
	coord := f.coordinator("coordinator", script{
		turn(call("c1", toolWork, map[string]any{"id": "d1", "sleep_ms": 2000})),
		turn(call("c2", toolCharge, map[string]any{"id": "d2"})),
		final("done"),
	}, "--tool-timeout", "20s")

	f.waitStarted("d1", 1, 15*time.Second)
	old.signal(syscall.SIGTERM)
	f.startWorker("new", "--ack-wait", "10s")

	res := coord.result(30*time.Second, 0)
	recs, _ := answered(t, res)
	if rec := recs["c1"]; rec.Outcome != protocol.OutcomeOK || rec.Worker != "old" {
		t.Errorf("c1 = %+v, want ok from the stopping worker", rec)
	}
	if rec := recs["c2"]; rec.Outcome != protocol.OutcomeOK || rec.Worker != "new" {
		t.Errorf("c2 = %+v, want ok from the new worker", rec)
	}
	if code := old.wait(15 * time.Second); code != 0 {
		t.Fatalf("the stopped worker exited %d, want 0", code)
	}
	// A clean stop is not an outage: nothing warns of a lost connection.
	for _, p := range []*proc{old, coord} {
		if strings.Contains(p.log(), "disconnected from NATS") {
			t.Errorf("%s logged a disconnection on a clean stop", p.name)
		}
	}
	for _, id := range []string{"d1", "d2"} {
		if runs := f.runsOf(id); len(runs) != 1 || !runs[0].done {
			t.Errorf("%s runs = %+v, want one finished run", id, runs)
		}
	}
	f.waitDrained(toolWork, 5*time.Second)
}

// TestCoordinatorInterruptedWhileServerIsDown: SIGINT reaches a coordinator
// whose nats-server is gone while a call runs. It still prints the partial
// result, every id answered cancelled, and exits within seconds.
func TestCoordinatorInterruptedWhileServerIsDown(t *testing.T) {
	// Not parallel: it bounds how long the stop takes.
	f := newFleet(t)
	w := f.startWorker("w1")
	defer w.kill() // its call would hold a graceful stop for the whole grace
	coord := f.coordinator("coordinator", script{
		turn(call("c1", toolWork, map[string]any{"id": "i1", "sleep_ms": 20000})),
		final("done"),
	}, "--tool-timeout", "30s")
	f.waitStarted("i1", 1, 15*time.Second)
	f.srv.Shutdown()
	coord.waitLog(10*time.Second, "disconnected from NATS")

	start := time.Now()
	coord.signal(syscall.SIGINT)
	res := coord.result(20*time.Second, 1)
	// Waiting on the gone server would take the client's 5s API timeout.
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("the coordinator took %v to stop, want well under 5s", d)
	}
	recs, _ := answered(t, res)
	if res.TerminationReason != "cancelled" || recs["c1"].Outcome != protocol.OutcomeCancelled {
		t.Fatalf("termination %q, call %+v; want cancelled", res.TerminationReason, recs["c1"])
	}
}

// TestResultOutlivesALongOutage: the nats-server is down for 6s — longer
// than a first round of publish attempts (5s) — while a non-idempotent call
// finishes. The worker keeps publishing the result while the coordinator
// still waits for it (the call's deadline), so once the server is back the
// model gets the tool's output, not outcome_unknown; the call ran once and
// the worker reports no failure.
func TestResultOutlivesALongOutage(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	w := f.startWorker("w1")
	coord := f.coordinator("coordinator", script{
		turn(call("c1", toolCharge, map[string]any{"id": "o1", "sleep_ms": 500})),
		final("done"),
	}, "--tool-timeout", "30s")
	f.waitStarted("o1", 1, 15*time.Second)
	f.srv.Shutdown()
	natstest.WaitFor(t, 10*time.Second, func() error {
		if runs := f.runsOf("o1"); !runs[0].done {
			return errors.New("the tool has not finished")
		}
		return nil
	})
	// The outage itself (not a wait for a condition): down for 6s after the
	// tool finished, longer than one publish attempt's 5s.
	time.Sleep(6 * time.Second)
	f.srv = natstest.Restart(t, f.srv)

	res := coord.result(40*time.Second, 0)
	recs, _ := answered(t, res)
	if rec := recs["c1"]; rec.Outcome != protocol.OutcomeOK || rec.Worker != "w1" {
		t.Fatalf("call = %+v, want ok from w1", rec)
	}
	if runs := f.runsOf("o1"); len(runs) != 1 {
		t.Fatalf("the call ran %d times, want 1", len(runs))
	}
	if strings.Contains(w.log(), "could not publish a call's result") {
		t.Fatal("the worker gave up publishing the result during the outage")
	}
	w.stop(10 * time.Second) // before the restarted server, cleaned up first
}
