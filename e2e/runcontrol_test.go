package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// Run control with real processes: a served run of an agent whose
// scripted model changes its second round when its instructions say
// "careful", a worker whose charge tool (not idempotent) records every
// execution, and the operator's "coordinator runs replay | fork".

// controlScript charges "a" in round 1 and "b" in round 2, then answers;
// with instructions holding "careful", round 2 only looks (the idempotent
// work tool) instead of charging "b".
func controlScript() map[string]any {
	answer := final(`done: {{result "a"}}, {{result "b"}}`)
	return map[string]any{
		"turns": script{
			turn(call("a", toolCharge, map[string]any{"id": "a", "output": "charged a"})),
			turn(call("b", toolCharge, map[string]any{"id": "b", "output": "charged b"})),
			answer,
		},
		"variants": []any{map[string]any{"system_contains": "careful", "turns": script{
			turn(call("a", toolCharge, map[string]any{"id": "a", "output": "charged a"})),
			turn(call("b", toolWork, map[string]any{"id": "look", "output": "looked"})),
			answer,
		}}},
	}
}

// controlFleet is a fleet with a worker, a serving coordinator and the
// agent named name (definition def, as "coordinator agents put" stores it).
type controlFleet struct {
	*fleet
	env []string
}

func newControlFleet(t *testing.T, defs ...map[string]any) *controlFleet {
	t.Helper()
	f := &controlFleet{fleet: newFleet(t)}
	f.env = []string{"NATS_URL=" + f.url(), "USER=e2e-operator", "HOME=" + f.dir}
	provisionAs(t, f.url(), f.env)
	for _, d := range defs {
		f.putAgent(d)
	}
	f.startWorker("w1")
	p := startProc(t, "serve", bins.coordinator, "serve", "--nats-url", f.url(), "--workers", "0", "--name", "c1",
		"--run-ack-wait", durableRunAckWait, "--log-level", "info")
	p.waitLog(20*time.Second, `"serving runs"`)
	return f
}

// putAgent stores a definition with "coordinator agents put".
func (f *controlFleet) putAgent(def map[string]any) {
	f.t.Helper()
	path := f.writeJSON(fmt.Sprintf("agent-%d.json", time.Now().UnixNano()), def)
	f.cli("agents", "put", path)
}

// cli runs the coordinator binary with args and returns its stdout; it
// fails the test on a non-zero exit.
func (f *controlFleet) cli(args ...string) string {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(f.t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bins.coordinator, args...)
	cmd.Env = f.env
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		f.t.Fatalf("coordinator %v: %v\n%s\n%s", args, err, out, stderr.String())
	}
	return string(out)
}

// submit runs "coordinator submit --wait --output json" with args and
// returns the result.
func (f *controlFleet) submit(args ...string) protocol.RunResult {
	f.t.Helper()
	out := f.cli(append([]string{"submit", "--wait", "--output", "json"}, args...)...)
	var res protocol.RunResult
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.Error != nil {
		f.t.Fatalf("coordinator submit %v: %v %+v\n%s", args, err, res.Error, out)
	}
	return res
}

// replay runs "coordinator runs replay RUN --json" with args.
func (f *controlFleet) replay(run protocol.RunID, args ...string) loop.ReplayReport {
	f.t.Helper()
	out := f.cli(append([]string{"runs", "replay", string(run), "--json"}, args...)...)
	var rep loop.ReplayReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		f.t.Fatalf("runs replay: %v\n%s", err, out)
	}
	return rep
}

// sideEffects decodes a served result's side effects.
func sideEffects(t *testing.T, res protocol.RunResult) []loop.SideEffect {
	t.Helper()
	var out []loop.SideEffect
	if len(res.SideEffects) > 0 {
		if err := json.Unmarshal(res.SideEffects, &out); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// opsAgent is the agent of the replay and fork tests.
func opsAgent(instructions string) map[string]any {
	script, _ := json.Marshal(controlScript())
	return map[string]any{"name": "ops", "instructions": instructions, "tools": []string{toolCharge, toolWork},
		"model": map[string]any{"provider": "scripted", "script": json.RawMessage(script)}}
}

// TestRunControlReplay: replaying a finished run with the same agent does
// not diverge; with new instructions (a file, or the agent's next
// revision) it diverges first in round 2, where the new model does not
// charge "b". No replay runs a tool or publishes a call: the charge
// counter and the calls stream stay as the run left them.
func TestRunControlReplay(t *testing.T) {
	t.Parallel()
	f := newControlFleet(t, opsAgent("be quick"))
	res := f.submit("--agent", "ops", "go")
	if res.TerminationReason != "natural" || res.Answer != "done: charged a, charged b" {
		t.Fatalf("run: %+v", res)
	}
	if e := f.effectsOf("a", "b", "look"); e["a"] != 1 || e["b"] != 1 || e["look"] != 0 {
		t.Fatalf("side effects %v after the run, want a and b once", e)
	}
	if se := sideEffects(t, res); len(se) != 2 || se[0].Round != 1 || se[1].Round != 2 || se[0].Tool != toolCharge {
		t.Fatalf("side_effects %+v, want the two charges", se)
	}
	stored := f.callsStored()

	same := f.replay(res.RunID)
	if same.Diverged || same.FirstDivergingRound != 0 || same.ReplayedCalls != 2 || same.NotReplayedCalls != 0 ||
		same.Replayed.Termination != loop.TerminationNatural {
		t.Fatalf("replay unchanged: %+v, want no divergence and both calls from the journal", same)
	}

	careful := filepath.Join(f.dir, "careful.txt")
	if err := os.WriteFile(careful, []byte("be careful"), 0o644); err != nil {
		t.Fatal(err)
	}
	changed := f.replay(res.RunID, "--instructions", careful)
	if !changed.Diverged || changed.FirstDivergingRound != 2 || changed.ReplayedCalls != 1 || changed.NotReplayedCalls != 1 {
		t.Fatalf("replay with new instructions: %+v, want a divergence at round 2", changed)
	}
	if d := changed.Rounds[0]; len(d.Added) != 1 || d.Added[0].Tool != toolWork || len(d.Dropped) != 1 || d.Dropped[0].Tool != toolCharge ||
		strings.Join(d.Added[0].ArgKeys, ",") != "id,output" {
		t.Fatalf("round 2 of the report: %+v, want work added and charge dropped, keys only", d)
	}
	text := f.cli("runs", "replay", string(res.RunID), "--instructions", careful)
	if !strings.Contains(text, "first in round 2") || !strings.Contains(text, "added    work {id, output}") || strings.Contains(text, "looked") {
		t.Fatalf("runs replay text:\n%s\nwant round 2 named, the added call's keys and no value", text)
	}

	f.putAgent(opsAgent("be careful"))
	next := f.replay(res.RunID, "--agent-revision", "2")
	if !next.Diverged || next.FirstDivergingRound != 2 {
		t.Fatalf("replay on revision 2: %+v, want a divergence at round 2", next)
	}

	if e := f.effectsOf("a", "b", "look"); e["a"] != 1 || e["b"] != 1 || e["look"] != 0 {
		t.Fatalf("side effects %v after the replays, want the run's only", e)
	}
	if got := f.callsStored(); got != stored {
		t.Fatalf("the calls stream stored %d messages after the replays, %d before: a replay published", got, stored)
	}
}

// TestRunControlFork: a fork at round 2 starts from round 1 as recorded:
// charge "a" does not run again, the fork's own charge of "b" runs once,
// and its result names only that side effect.
func TestRunControlFork(t *testing.T) {
	t.Parallel()
	f := newControlFleet(t, opsAgent("be quick"))
	res := f.submit("--agent", "ops", "go")
	if res.TerminationReason != "natural" {
		t.Fatalf("run: %+v", res)
	}
	path := filepath.Join(f.dir, "fork.json")
	f.cli("runs", "fork", string(res.RunID), "--at", "2", "--out", path)
	fork := f.submit("--agent", "ops", "--messages", path)
	if fork.TerminationReason != "natural" || fork.Answer != "done: charged a, charged b" || fork.RunID == res.RunID {
		t.Fatalf("fork: %+v", fork)
	}
	if e := f.effectsOf("a", "b"); e["a"] != 1 || e["b"] != 2 {
		t.Fatalf("side effects %v, want a once (the run's) and b twice (the run's and the fork's)", e)
	}
	se := sideEffects(t, fork)
	if len(se) != 1 || se[0].Tool != toolCharge || se[0].Outcome != protocol.OutcomeOK {
		t.Fatalf("fork side_effects %+v, want its one charge", se)
	}
	var calls []loop.CallRecord
	if err := json.Unmarshal(fork.Calls, &calls); err != nil || len(calls) != 1 {
		t.Fatalf("fork calls %s, want its one call", fork.Calls)
	}
	for _, c := range sideEffects(t, res) {
		if c.CallKey == calls[0].CallKey {
			t.Fatalf("the fork's call has the run's key %s", c.CallKey)
		}
	}
}

// TestRunControlDryRun: a dry run of an agent with a destructive tool that
// needs approval asks for the approval as usual, runs only the read-only
// echo, and answers every charge simulated: the counter stays 0, and the
// result says it was a dry run with no side effect.
func TestRunControlDryRun(t *testing.T) {
	t.Parallel()
	script, _ := json.Marshal(map[string]any{"turns": script{
		turn(call("d1", toolCharge, map[string]any{"id": "d1", "output": "secret-value"}),
			call("d2", toolCharge, map[string]any{"id": "d2"}),
			call("e1", "echo", map[string]any{"text": "hi"})),
		final(`{{result "d1"}} | {{result "e1"}}`),
	}})
	f := newControlFleet(t, map[string]any{"name": "dry", "dry_run": true, "tools": []string{toolCharge, "echo"},
		"require_approval": []string{toolCharge},
		"model":            map[string]any{"provider": "scripted", "script": json.RawMessage(script)}})
	var asked atomic.Int64
	f.approveCounting(&asked)
	res := f.submit("--agent", "dry", "go")
	if !res.DryRun || len(res.SideEffects) != 0 || res.TerminationReason != "natural" {
		t.Fatalf("dry run: %+v, want dry_run and no side effects", res)
	}
	var calls []loop.CallRecord
	if err := json.Unmarshal(res.Calls, &calls); err != nil {
		t.Fatal(err)
	}
	outcomes := map[string]protocol.Outcome{}
	for _, c := range calls {
		outcomes[c.CallID] = c.Outcome
	}
	if outcomes["d1"] != protocol.OutcomeSimulated || outcomes["d2"] != protocol.OutcomeSimulated || outcomes["e1"] != protocol.OutcomeOK {
		t.Fatalf("outcomes %v, want both charges simulated and the read-only echo ok", outcomes)
	}
	if e := f.effectsOf("d1", "d2"); e["d1"] != 0 || e["d2"] != 0 {
		t.Fatalf("charge ran %v in a dry run", e)
	}
	if n := asked.Load(); n != 2 {
		t.Fatalf("%d approval requests, want 2 (one per charge)", n)
	}
	if out := f.cli("runs", "show", string(res.RunID)); !strings.Contains(out, "finished (natural), a dry run") {
		t.Fatalf("runs show:\n%s\nwant it named a dry run", out)
	}
	if !strings.Contains(res.Answer, "not run (dry run)") || !strings.Contains(res.Answer, "{id, output}") ||
		strings.Contains(res.Answer, "secret-value") || !strings.HasSuffix(res.Answer, "| hi") {
		t.Fatalf("answer %q: want the simulated observation with keys and no value, and echo's output", res.Answer)
	}
}

// approveCounting approves every approval request and counts them.
func (f *controlFleet) approveCounting(n *atomic.Int64) {
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
		n.Add(1)
		body := fmt.Sprintf(`{"digest":%q,"approved":true,"approver":"e2e-operator"}`, req.Digest)
		f.js.Publish(context.Background(), req.DecisionSubject, []byte(body))
	})
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(cc.Stop)
}

// TestRunControlOnTheShippedConfig runs replay and fork with the roles of
// deploy/nats-server.conf: a run of an agent served by the coordinator
// user and submitted by the client is replayed and forked by the
// operator, whose user reads the journal and the agents bucket and may
// publish no call; the client submits the fork.
func TestRunControlOnTheShippedConfig(t *testing.T) {
	t.Parallel()
	srv := startApprovalServer(t)
	url := srv.ClientURL()
	dir := t.TempDir()
	effects := filepath.Join(dir, "effects.log")
	manifest := writeJSON(t, dir, "tools.json", map[string]any{"tools": []any{
		map[string]any{"name": toolCharge, "description": "records its runs", "parameters": json.RawMessage(sidefxSchema),
			"timeout": "30s", "command": []string{bins.sidefx}, "env": map[string]string{"SIDEFX_LOG": effects}},
		map[string]any{"name": toolWork, "description": "records its runs", "parameters": json.RawMessage(sidefxSchema),
			"timeout": "30s", "command": []string{bins.sidefx}, "idempotent": true, "env": map[string]string{"SIDEFX_LOG": effects}},
	}})
	worker := startProcEnv(t, "toolworker", approvalEnv(t, url, "worker"), bins.toolworker, "--tools", manifest, "--name", "w1")
	waitForApprovalCatalog(t, url, worker, toolCharge, toolWork)
	serve := startProcEnv(t, "serve", approvalEnv(t, url, "coordinator"), bins.coordinator,
		"serve", "--workers", "0", "--name", "c1", "--log-level", "info")
	serve.waitLog(20*time.Second, `"serving runs"`)
	as := func(user string, args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bins.coordinator, args...)
		cmd.Env, cmd.Dir = append(approvalEnv(t, url, user), "USER=e2e-operator"), dir
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("coordinator %v as %s: %v\n%s\n%s", args, user, err, out, stderr.String())
		}
		return string(out)
	}
	as("operator", "agents", "put", writeJSON(t, dir, "ops.json", opsAgent("be quick")))
	var res protocol.RunResult
	out := as("client", "submit", "--agent", "ops", "--wait", "--output", "json", "go")
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.TerminationReason != "natural" {
		t.Fatalf("run: %v\n%s", err, out)
	}
	countCharges := func() int { data, _ := os.ReadFile(effects); return strings.Count(string(data), "start ") }
	if n := countCharges(); n != 2 {
		t.Fatalf("%d executions after the run, want 2", n)
	}

	var same, changed loop.ReplayReport
	json.Unmarshal([]byte(as("operator", "runs", "replay", string(res.RunID), "--json")), &same)
	careful := filepath.Join(dir, "careful.txt")
	if err := os.WriteFile(careful, []byte("be careful"), 0o644); err != nil {
		t.Fatal(err)
	}
	json.Unmarshal([]byte(as("operator", "runs", "replay", string(res.RunID), "--instructions", careful, "--json")), &changed)
	if same.Diverged || same.ReplayedCalls != 2 || !changed.Diverged || changed.FirstDivergingRound != 2 {
		t.Fatalf("replays as the operator: same %+v, changed %+v", same, changed)
	}

	fork := filepath.Join(dir, "fork.json")
	as("operator", "runs", "fork", string(res.RunID), "--at", "2", "--out", fork)
	var forked protocol.RunResult
	out = as("client", "submit", "--agent", "ops", "--messages", fork, "--wait", "--output", "json")
	if err := json.Unmarshal([]byte(out), &forked); err != nil || forked.TerminationReason != "natural" {
		t.Fatalf("fork: %v\n%s", err, out)
	}
	if se := sideEffects(t, forked); len(se) != 1 || countCharges() != 3 {
		t.Fatalf("fork side_effects %+v and %d executions in all, want the fork's one charge (3 in all)", se, countCharges())
	}
}
