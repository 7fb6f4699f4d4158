package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/coordinator"
	"github.com/toolfleet/toolfleet/internal/natsbus/stores"
	"github.com/toolfleet/toolfleet/internal/natstest"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// durableScript is a run of three rounds: a non-idempotent charge; then a
// slow non-idempotent charge and an idempotent work call that needs
// approval; then an answer quoting them. Every output is fixed, so the
// transcript does not depend on which process ran what (each fleet has a
// side-effect file of its own).
func durableScript() script {
	return script{
		turn(call("a", toolCharge, map[string]any{"id": "a", "output": "charged a"})),
		turn(call("b", toolCharge, map[string]any{"id": "b", "sleep_ms": 1000, "output": "charged b"}),
			call("w", toolWork, map[string]any{"id": "w", "output": "worked"})),
		final(`done: {{result "a"}}, {{result "b"}}, {{result "w"}}`),
	}
}

// durableRunAckWait is the served coordinators' --run-ack-wait: a killed
// owner's run is taken by another coordinator this long after its last
// heartbeat.
const durableRunAckWait = "2s"

// startServing starts "coordinator serve" on f with the script's model;
// crashAfter, when set, is its TOOLFLEET_CRASH_AFTER.
func (f *fleet) startServing(name, model, crashAfter string, extra ...string) *proc {
	f.t.Helper()
	var env []string
	if crashAfter != "" {
		env = append(env, "TOOLFLEET_CRASH_AFTER="+crashAfter)
	}
	args := append([]string{"serve", "--nats-url", f.url(), "--workers", "0", "--model", "scripted:" + model,
		"--name", name, "--run-ack-wait", durableRunAckWait, "--require-approval", toolWork,
		"--shutdown-grace", "10s", "--log-level", "info"}, extra...)
	p := startProcEnv(f.t, name, env, bins.coordinator, args...)
	p.waitLog(20*time.Second, `"serving runs"`)
	return p
}

// submitRun submits a prompt to the serving coordinators.
func (f *fleet) submitRun(prompt string) protocol.RunID {
	f.t.Helper()
	var run protocol.RunID
	natstest.WaitFor(f.t, 20*time.Second, func() error {
		resp, err := coordinator.SubmitRaw(f.t.Context(), f.nc, protocol.Subjects{}, []byte(fmt.Sprintf(`{"prompt": %q}`, prompt)))
		if err != nil {
			return err
		}
		if resp.Status != protocol.RunAccepted {
			return fmt.Errorf("submit: %+v", resp)
		}
		run = resp.RunID
		return nil
	})
	return run
}

// runResult waits for run's stored result and decodes its transcript.
func (f *fleet) runResult(run protocol.RunID, timeout time.Duration) (protocol.RunResult, []loop.Message, []loop.CallRecord) {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(f.t.Context(), timeout)
	defer cancel()
	res, _, err := coordinator.WaitResult(ctx, f.js, protocol.Subjects{}, protocol.RunKey("default", run))
	if err != nil {
		f.t.Fatalf("run %s: %v", run, err)
	}
	var msgs []loop.Message
	var calls []loop.CallRecord
	if err := json.Unmarshal(res.Messages, &msgs); err != nil {
		f.t.Fatalf("run %s: transcript: %v (%+v)", run, err, res)
	}
	json.Unmarshal(res.Calls, &calls)
	return res, msgs, calls
}

// approveAll approves every approval request of the fleet as it comes,
// once release is closed.
func (f *fleet) approveAll(release <-chan struct{}) {
	f.t.Helper()
	cons, err := f.js.OrderedConsumer(f.t.Context(), "FLEET_APPROVALS", jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{protocol.Subjects{}.ApprovalRequests()},
	})
	if err != nil {
		f.t.Fatal(err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		var req protocol.ApprovalRequest
		if json.Unmarshal(m.Data(), &req) != nil {
			return
		}
		go func() {
			select {
			case <-release:
			case <-f.t.Context().Done():
				return
			}
			body := fmt.Sprintf(`{"digest":%q,"approved":true,"approver":"e2e-operator"}`, req.Digest)
			f.js.Publish(context.Background(), req.DecisionSubject, []byte(body))
		}()
	})
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(cc.Stop)
}

// modelRounds counts, over the logs of procs, the model calls made for run,
// by round.
func modelRounds(run protocol.RunID, procs ...*proc) map[int]int {
	out := map[int]int{}
	for _, p := range procs {
		for _, l := range p.logLines(func(m map[string]any) bool {
			return m["event"] == "model_call_start" && m["run_id"] == string(run)
		}) {
			r, _ := l["round"].(float64)
			out[int(r)]++
		}
	}
	return out
}

// effectsOf counts the runs of each side-effect id.
func (f *fleet) effectsOf(ids ...string) map[string]int {
	out := map[string]int{}
	for _, id := range ids {
		out[id] = len(f.runsOf(id))
	}
	return out
}

// referenceTranscript runs durableScript uninterrupted on a fleet of its
// own.
func referenceTranscript(t *testing.T) []loop.Message {
	f := newFleet(t)
	f.startWorker("rw1")
	model := f.writeJSON("script.json", map[string]any{"turns": durableScript()})
	c := f.startServing("ref", model, "")
	release := make(chan struct{})
	close(release)
	f.approveAll(release)
	run := f.submitRun("go")
	res, msgs, _ := f.runResult(run, 60*time.Second)
	if res.TerminationReason != "natural" || !strings.Contains(res.Answer, "charged a, charged b, worked") {
		t.Fatalf("reference run: %+v", res)
	}
	if r := modelRounds(run, c); !reflect.DeepEqual(r, map[int]int{1: 1, 2: 1, 3: 1}) {
		t.Fatalf("reference run asked the model %v", r)
	}
	return msgs
}

// TestDurableRunSurvivesKill9AtEachStepBoundary kills the coordinator
// owning a run with SIGKILL right after it journaled each kind of step —
// a model response (rounds 1 and 2), an approval request (the approval
// then waits with no coordinator alive, and is given then), the dispatch
// of round 2 (before its calls are published), the first publish
// journaled (round 2's, whose slow call is gathered for more than 250 ms;
// round 1's calls answer sooner, unless the machine is slow), the final
// answer (before the result is stored) —
// or as it asks the model for round 2, when round 1's observations, held
// to be stored with that response, are not journaled yet; and starts
// another coordinator. The run completes there with the uninterrupted
// run's transcript; each non-idempotent call ran exactly once (the
// side-effect file) and each model round was asked once, but for the round
// being asked as the crash came.
func TestDurableRunSurvivesKill9AtEachStepBoundary(t *testing.T) {
	t.Parallel()
	want := referenceTranscript(t)
	for _, crash := range []string{"model:1", "model:2", "approval_requested:1", "dispatched:2", "published:1", "asking:2", "finished:1"} {
		t.Run(strings.ReplaceAll(crash, ":", "_"), func(t *testing.T) {
			t.Parallel() // each has its own server and processes, and mostly waits for the run ack wait
			f := newFleet(t)
			f.startWorker("w1")
			model := f.writeJSON("script.json", map[string]any{"turns": durableScript()})
			victim := f.startServing("c1", model, crash)
			release := make(chan struct{})
			f.approveAll(release)
			if !strings.HasPrefix(crash, "approval") {
				close(release)
			}
			run := f.submitRun("go")
			if code := victim.wait(60 * time.Second); code != -1 {
				t.Fatalf("c1 exited %d, want killed by its crash point", code)
			}
			if crash == "asking:2" {
				// Round 1's observations wait for round 2's response, unless
				// the model took longer than the loop holds them.
				recs, err := stores.ReadJournal(t.Context(), f.js, protocol.Subjects{}, run)
				if err != nil {
					t.Fatal(err)
				}
				observed := slices.ContainsFunc(recs, func(r stores.JournalRecord) bool { return r.Entry.Kind == loop.EntryObserved })
				t.Logf("round 1's observations journaled at the crash: %v", observed)
			}
			if strings.HasPrefix(crash, "approval") {
				// The decision is sent while no coordinator is alive: it
				// is read from the approvals stream once one is.
				close(release)
			}
			survivor := f.startServing("c2", model, "")
			res, msgs, _ := f.runResult(run, 90*time.Second)
			if res.TerminationReason != "natural" || res.Coordinator != "c2" || res.Attempt < 2 {
				t.Fatalf("result %+v, want natural on c2 after a takeover", res)
			}
			if !reflect.DeepEqual(msgs, want) {
				t.Fatalf("transcript\n%+v\nwant the uninterrupted one\n%+v", msgs, want)
			}
			if e := f.effectsOf("a", "b", "w"); e["a"] != 1 || e["b"] != 1 || e["w"] != 1 {
				t.Fatalf("side effects %v, want each exactly once", e)
			}
			want := map[int]int{1: 1, 2: 1, 3: 1}
			if crash == "asking:2" {
				want[2] = 2 // asked as the crash came, then by the survivor
			}
			if r := modelRounds(run, victim, survivor); !reflect.DeepEqual(r, want) {
				t.Fatalf("model asked %v by round, want %v", r, want)
			}
		})
	}
}

// TestDurableStalledOwnerIsFenced freezes the coordinator that owns a run
// (SIGSTOP) while its second round's slow call runs. Another coordinator
// takes the run over after the run ack wait and finishes it. Then the
// stalled owner is thawed (SIGCONT): its next append is refused (another
// owner appended since), so it stops there — it publishes no call and
// stores no result (it may have asked the model for the next round, whose
// response is stored with the round's observations: that response takes
// no effect) — and leaves the run message alone. Every call ran once; the journal holds one entry per
// step after the takeover.
func TestDurableStalledOwnerIsFenced(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	f.startWorker("w1")
	s := durableScript()
	s[1] = turn(call("b", toolCharge, map[string]any{"id": "b", "sleep_ms": 4000, "output": "charged b"}),
		call("w", toolWork, map[string]any{"id": "w", "output": "worked"}))
	model := f.writeJSON("script.json", map[string]any{"turns": s})
	stale := f.startServing("c1", model, "")
	release := make(chan struct{})
	close(release)
	f.approveAll(release)
	run := f.submitRun("go")
	f.waitStarted("b", 1, 30*time.Second)
	stale.signal(syscall.SIGSTOP)
	stopped := true
	t.Cleanup(func() {
		if stopped {
			stale.signal(syscall.SIGCONT)
		}
	})
	survivor := f.startServing("c2", model, "")
	res, _, _ := f.runResult(run, 60*time.Second)
	if res.TerminationReason != "natural" || res.Coordinator != "c2" {
		t.Fatalf("result %+v, want natural on c2", res)
	}
	stale.signal(syscall.SIGCONT)
	stopped = false
	stale.waitLog(30*time.Second, "another coordinator took the run over")

	if n := len(stale.logLines(func(m map[string]any) bool { return m["message"] == "run finished" && m["run_id"] == string(run) })); n != 0 {
		t.Fatalf("the stalled owner finished the run %d times", n)
	}
	// Round 2's observations are held to be stored with round 3's model
	// response, so the stalled owner may ask for that response before its
	// append is refused; the response takes no effect.
	if r := modelRounds(run, survivor); !reflect.DeepEqual(r, map[int]int{3: 1}) {
		t.Fatalf("the survivor asked the model %v by round, want round 3 once", r)
	}
	if r := modelRounds(run, stale); r[1] != 1 || r[2] != 1 || r[3] > 1 || len(r) > 3 {
		t.Fatalf("the stalled owner asked the model %v by round, want rounds 1 and 2 once, round 3 at most once", r)
	}
	if e := f.effectsOf("a", "b", "w"); e["a"] != 1 || e["b"] != 1 || e["w"] != 1 {
		t.Fatalf("side effects %v, want each exactly once", e)
	}
	if n := f.callsStored(); n != 3 {
		t.Fatalf("the calls stream stored %d calls, want 3", n)
	}
	recs, err := stores.ReadJournal(t.Context(), f.js, protocol.Subjects{}, run)
	if err != nil {
		t.Fatal(err)
	}
	var after []string
	for _, r := range recs {
		if r.Entry.Kind == stores.EntryOwner {
			after = nil
			if r.Entry.Owner != "c2" {
				continue
			}
		}
		after = append(after, r.Entry.Kind)
	}
	// Round 3 is offered the tools of round 2: no tools entry. Round 2's
	// publish is journaled by whichever owner gathered its results for
	// 250 ms first.
	if want := []string{"owner", "observed", "model", "finished"}; !reflect.DeepEqual(after, want) &&
		!reflect.DeepEqual(after, slices.Insert(want, 1, "published")) {
		t.Fatalf("journal after the takeover: %v, want %v (with published after the owner, or not)", after, want)
	}
}

// TestDurableRunResume: "coordinator run --nats-url" journals its run;
// killed (SIGKILL) while its second round's slow charge runs, the run is
// seen with "coordinator runs show" (its owner, round 2 and the pending
// calls) and continued with "coordinator resume RUN", which prints the
// uninterrupted run's transcript; every call ran once, every round was
// asked once.
func TestDurableRunResume(t *testing.T) {
	t.Parallel()
	want := referenceTranscript(t)
	f := newFleet(t)
	f.startWorker("w1")
	model := f.writeJSON("script.json", map[string]any{"turns": durableScript()})
	args := []string{"--nats-url", f.url(), "--workers", "0", "--model", "scripted:" + model,
		"--require-approval", toolWork, "--output", "json", "--log-level", "info"}
	first := startProc(t, "run", bins.coordinator, append([]string{"run"}, append(args, "go")...)...)
	first.waitLog(30*time.Second, `"run journaled"`)
	release := make(chan struct{})
	close(release)
	f.approveAll(release)
	f.waitStarted("b", 1, 30*time.Second)
	first.kill()
	var run string
	for _, l := range first.logLines(func(m map[string]any) bool { return m["message"] == "run journaled" }) {
		run, _ = l["run_id"].(string)
	}
	if !protocol.ValidToken(run) {
		t.Fatalf("no run id in the log:\n%s", first.log())
	}

	show := exec.CommandContext(t.Context(), bins.coordinator, "runs", "show", run)
	show.Env = []string{"NATS_URL=" + f.url()}
	out, err := show.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "status:     running") || !strings.Contains(string(out), "round:      2") ||
		!strings.Contains(string(out), "pending call:      ") {
		t.Fatalf("coordinator runs show: %v\n%s", err, out)
	}

	resumed := startProc(t, "resume", bins.coordinator, append([]string{"resume"}, append(args, run)...)...)
	res := resumed.result(60*time.Second, 0)
	if string(res.RunID) != run || res.TerminationReason != loop.TerminationNatural || !reflect.DeepEqual(res.Messages, want) {
		t.Fatalf("resumed run %s: %s\n%+v\nwant\n%+v", res.RunID, res.TerminationReason, res.Messages, want)
	}
	if e := f.effectsOf("a", "b", "w"); e["a"] != 1 || e["b"] != 1 || e["w"] != 1 {
		t.Fatalf("side effects %v, want each exactly once", e)
	}
	if r := modelRounds(protocol.RunID(run), first, resumed); !reflect.DeepEqual(r, map[int]int{1: 1, 2: 1, 3: 1}) {
		t.Fatalf("model asked %v by round, want each round once", r)
	}
}

// TestDurableRunsCancel: a served run waiting for an approval is listed
// by "coordinator runs list" and cancelled by "coordinator runs cancel";
// its result is cancelled, and the journal says so.
func TestDurableRunsCancel(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	f.startWorker("w1")
	model := f.writeJSON("script.json", map[string]any{"turns": durableScript()})
	f.startServing("c1", model, "")
	run := f.submitRun("go")
	natstest.WaitFor(t, 30*time.Second, func() error {
		recs, err := stores.ReadJournal(t.Context(), f.js, protocol.Subjects{}, run)
		if err != nil {
			return err
		}
		if len(recs) == 0 || recs[len(recs)-1].Entry.Kind != loop.EntryApprovalRequested {
			return fmt.Errorf("%d entries, not waiting for an approval yet", len(recs))
		}
		return nil
	})
	cli := func(args ...string) string {
		cmd := exec.CommandContext(t.Context(), bins.coordinator, args...)
		cmd.Env = []string{"NATS_URL=" + f.url(), "USER=e2e-operator"}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("coordinator %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	if out := cli("runs", "list"); !strings.Contains(out, string(run)) || !strings.Contains(out, "1 approvals") {
		t.Fatalf("runs list:\n%s", out)
	}
	cli("runs", "cancel", string(run), "--reason", "not today")
	res, _, _ := f.runResult(run, 30*time.Second)
	if res.TerminationReason != "cancelled" {
		t.Fatalf("result %+v, want cancelled", res)
	}
	if out := cli("runs", "show", string(run)); !strings.Contains(out, "finished (cancelled)") || !strings.Contains(out, "result:     true") {
		t.Fatalf("runs show:\n%s", out)
	}
}
