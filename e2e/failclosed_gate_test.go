package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// gateScript is a run of one non-idempotent charge, then an answer quoting
// it.
func gateScript() script {
	return script{
		turn(call("c", toolCharge, map[string]any{"id": "c", "output": "charged"})),
		final(`done: {{result "c"}}`),
	}
}

// serveGate starts "coordinator serve" on f with the script's model and
// the flags given (none of them about approvals unless extra says so).
func (f *fleet) serveGate(name, model string, extra ...string) *proc {
	f.t.Helper()
	args := append([]string{"serve", "--nats-url", f.url(), "--workers", "0", "--model", "scripted:" + model,
		"--name", name, "--run-ack-wait", durableRunAckWait, "--shutdown-grace", "10s", "--log-level", "info"}, extra...)
	p := startProc(f.t, name, bins.coordinator, args...)
	p.waitLog(20*time.Second, `"serving runs"`)
	return p
}

// TestFailClosedTakeoverKeepsTheGate: a served run waits for the approval
// its coordinator's --require-approval charge asked for; that (only)
// serving coordinator is SIGKILLed and a fresh one started without the
// flag takes the run over. The charge does not run while the approval is
// open: the new owner asks the gate again, and the charge runs once when
// approved; left undecided past the run's approval timeout, it is
// answered approval_expired and never runs.
func TestFailClosedTakeoverKeepsTheGate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		approve bool
		outcome protocol.Outcome
		runs    int
	}{
		{"approved", true, protocol.OutcomeOK, 1},
		{"expired", false, protocol.OutcomeApprovalExpired, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFleet(t)
			f.startWorker("w1")
			model := f.writeJSON("script.json", map[string]any{"turns": gateScript()})
			// The expired case's timeout runs out after the takeover: the
			// new owner keeps the journaled deadline.
			first := f.serveGate("c1", model, "--require-approval", toolCharge, "--approval-timeout", "20s")
			release := make(chan struct{})
			if tc.approve {
				f.approveAll(release)
			}
			run := f.submitRun("go")
			first.waitLog(30*time.Second, `"approval requested"`)
			first.kill()
			second := f.serveGate("c2", model)
			second.waitLog(60*time.Second, `"resuming the run from its journal"`, `"approval requested"`)
			if n := len(f.runsOf("c")); n != 0 {
				t.Fatalf("the charge ran %d times before any decision, want 0", n)
			}
			close(release)
			res, _, calls := f.runResult(run, 90*time.Second)
			if res.Coordinator != "c2" || len(calls) != 1 || calls[0].Outcome != tc.outcome {
				t.Fatalf("result on %s with calls %+v, want one call %s on c2", res.Coordinator, calls, tc.outcome)
			}
			if n := len(f.runsOf("c")); n != tc.runs {
				t.Fatalf("the charge ran %d times, want %d", n, tc.runs)
			}
		})
	}
}

// TestFailClosedResumeKeepsTheGate: "coordinator run --require-approval
// charge" is SIGKILLed while its approval waits; "coordinator resume RUN"
// without the flag asks the gate again, runs nothing until approved, and
// then runs the charge once.
func TestFailClosedResumeKeepsTheGate(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	f.startWorker("w1")
	model := f.writeJSON("script.json", map[string]any{"turns": gateScript()})
	args := []string{"--nats-url", f.url(), "--workers", "0", "--model", "scripted:" + model, "--output", "json", "--log-level", "info"}
	first := startProc(t, "run", bins.coordinator, append([]string{"run", "--require-approval", toolCharge}, append(args, "go")...)...)
	first.waitLog(30*time.Second, `"approval requested"`)
	first.kill()
	var run string
	for _, l := range first.logLines(func(m map[string]any) bool { return m["message"] == "run journaled" }) {
		run, _ = l["run_id"].(string)
	}
	if !protocol.ValidToken(run) {
		t.Fatalf("no run id in the log:\n%s", first.log())
	}
	release := make(chan struct{})
	f.approveAll(release)
	resumed := startProc(t, "resume", bins.coordinator, append([]string{"resume"}, append(args, run)...)...)
	resumed.waitLog(30*time.Second, `"approval requested"`)
	if n := len(f.runsOf("c")); n != 0 {
		t.Fatalf("the charge ran %d times before any decision, want 0", n)
	}
	close(release)
	res := resumed.result(60*time.Second, 0)
	recs, _ := answered(t, res)
	if res.TerminationReason != loop.TerminationNatural || recs["c"].Outcome != protocol.OutcomeOK || !strings.Contains(res.Answer, "charged") {
		t.Fatalf("resumed run: %s, call %+v, answer %q", res.TerminationReason, recs["c"], res.Answer)
	}
	if n := len(f.runsOf("c")); n != 1 {
		t.Fatalf("the charge ran %d times, want once", n)
	}
}
