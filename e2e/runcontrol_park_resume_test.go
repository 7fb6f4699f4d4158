package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/natstest"
	"github.com/toolfleet/toolfleet/internal/runs"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/model/openai/openaitest"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// Park and resume with real processes: an OpenAI-compatible model server
// (a real listener the coordinators' openai provider calls) that answers
// HTTP 503 while it is down, serving coordinators, a worker whose charge
// tool (not idempotent) records every execution, on the shipped
// deploy/nats-server.conf with its users.

// parkModel charges "<run>-a" in round 1 and "<run>-b" in round 2, then
// answers "done <run>" (a run is prompted "<run>"); while down it answers
// every round after the first HTTP 503. It counts the requests of each
// run's rounds.
type parkModel struct {
	mu    sync.Mutex
	down  bool
	asked map[string]int // "<run>/<round>" -> requests
}

func (m *parkModel) setDown(down bool) {
	m.mu.Lock()
	m.down = down
	m.mu.Unlock()
}

func (m *parkModel) requests(run string, round int) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.asked[fmt.Sprintf("%s/%d", run, round)]
}

func (m *parkModel) handle(_ int, req *openaitest.Request) openaitest.Reply {
	run, tools := "", 0
	for _, msg := range req.Messages {
		switch {
		case msg.Role == "user" && run == "":
			run = msg.Text()
		case msg.Role == "tool":
			tools++
		}
	}
	m.mu.Lock()
	m.asked[fmt.Sprintf("%s/%d", run, tools+1)]++
	down := m.down
	m.mu.Unlock()
	if down && tools > 0 {
		return openaitest.Reply{Status: 503, Error: "the upstream is overloaded"}
	}
	tc := func(id string) loop.ToolCall {
		args, _ := json.Marshal(map[string]any{"id": run + "-" + id, "output": "charged " + id})
		return loop.ToolCall{ID: id, Type: "function", Function: loop.FunctionCall{Name: toolCharge, Arguments: string(args)}}
	}
	switch tools {
	case 0:
		return openaitest.Reply{ToolCalls: []loop.ToolCall{tc("a")}}
	case 1:
		return openaitest.Reply{ToolCalls: []loop.ToolCall{tc("b")}}
	default:
		return openaitest.Reply{Content: "done " + run}
	}
}

// parkFleet is the shipped configuration's server with a worker and the
// park model; coordinators are started by serve.
type parkFleet struct {
	*fleet
	url   string
	model *parkModel
	// results reads the runs bucket as the operator.
	results jetstream.KeyValue
}

func newParkFleet(t *testing.T) *parkFleet {
	t.Helper()
	srv := startApprovalServer(t)
	f := &parkFleet{url: srv.ClientURL(), model: &parkModel{down: true, asked: map[string]int{}}}
	f.fleet = &fleet{t: t, dir: t.TempDir()}
	f.effects = filepath.Join(f.dir, "effects.log")
	manifest := writeJSON(t, f.dir, "tools.json", map[string]any{"tools": []any{
		map[string]any{"name": toolCharge, "description": "records its runs", "parameters": json.RawMessage(sidefxSchema),
			"timeout": "30s", "command": []string{bins.sidefx}, "env": map[string]string{"SIDEFX_LOG": f.effects}},
	}})
	worker := startProcEnv(t, "toolworker", approvalEnv(t, f.url, "worker"), bins.toolworker, "--tools", manifest, "--name", "w1")
	waitForApprovalCatalog(t, f.url, worker, toolCharge)
	modelSrv := openaitest.NewServer(t, f.model.handle)
	f.urls = modelSrv.URL // the model's URL, for serve
	_, js := approvalConn(t, f.url, "operator")
	kv, err := js.KeyValue(t.Context(), protocol.Subjects{}.RunsBucket())
	if err != nil {
		t.Fatal(err)
	}
	f.results = kv
	return f
}

// serve starts "coordinator serve" as the coordinator user, named name.
func (f *parkFleet) serve(name string) *proc {
	f.t.Helper()
	p := startProcEnv(f.t, name, approvalEnv(f.t, f.url, "coordinator"), bins.coordinator, "serve", "--workers", "0",
		"--model", "openai:park", "--model-base-url", f.urls, "--name", name, "--run-ack-wait", durableRunAckWait, "--log-level", "info")
	p.waitLog(30*time.Second, `"serving runs"`)
	return p
}

// as runs the coordinator binary as user; it returns the output and the
// error of a non-zero exit.
func (f *parkFleet) as(user string, args ...string) (string, error) {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(f.t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bins.coordinator, args...)
	cmd.Env, cmd.Dir = append(approvalEnv(f.t, f.url, user), "USER=e2e-operator"), f.dir
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// must is as, failing the test on a non-zero exit.
func (f *parkFleet) must(user string, args ...string) string {
	f.t.Helper()
	out, err := f.as(user, args...)
	if err != nil {
		f.t.Fatalf("coordinator %v as %s: %v\n%s", args, user, err, out)
	}
	return out
}

// submit queues the prompt as the client under submission id and returns
// its run id.
func (f *parkFleet) submit(id, prompt string) protocol.RunID {
	f.t.Helper()
	f.must("client", "submit", "--id", id, prompt)
	return protocol.SubmissionRunID("client", id)
}

// waitResult waits until the run's stored result ends with reason.
func (f *parkFleet) waitResult(run protocol.RunID, reason string) protocol.RunResult {
	f.t.Helper()
	var res protocol.RunResult
	natstest.WaitFor(f.t, 90*time.Second, func() error {
		e, err := f.results.Get(f.t.Context(), protocol.RunKey("client", run))
		if err != nil {
			return err
		}
		if res, err = protocol.DecodeRunResult(e.Value(), len(e.Value())+1); err != nil {
			return err
		}
		if res.TerminationReason != reason {
			return fmt.Errorf("result %s (%+v), want %s", res.TerminationReason, res.Error, reason)
		}
		return nil
	})
	return res
}

// state is "runs show RUN --json" as the operator.
func (f *parkFleet) state(run protocol.RunID) runs.State {
	f.t.Helper()
	var st runs.State
	if out := f.must("operator", "runs", "show", string(run), "--json"); json.Unmarshal([]byte(out), &st) != nil {
		f.t.Fatalf("runs show: %s", out)
	}
	return st
}

// answeredOnce checks that every tool call id of the transcript is
// answered by exactly one tool message.
func answeredOnce(t *testing.T, res protocol.RunResult) []loop.Message {
	t.Helper()
	var msgs []loop.Message
	if err := json.Unmarshal(res.Messages, &msgs); err != nil {
		t.Fatalf("transcript: %v", err)
	}
	answers := map[string]int{}
	var ids []string
	for _, m := range msgs {
		for _, tc := range m.ToolCalls {
			ids = append(ids, tc.ID)
		}
		if m.Role == "tool" {
			answers[m.ToolCallID]++
		}
	}
	for _, id := range ids {
		if answers[id] != 1 {
			t.Errorf("tool_call_id %s answered %d times, want once", id, answers[id])
		}
	}
	if len(answers) != len(ids) {
		t.Errorf("%d tool messages for %d calls", len(answers), len(ids))
	}
	return msgs
}

// TestRunControlParkAndResume: the model server answers HTTP 503: the run
// parks after round 1 (its charge ran, its id answered), unowned, listed by
// "runs list --state parked". Its coordinator is SIGKILLed and another
// started; a client's resume request is refused by the server and
// resumes nothing; the model comes back; the operator's "runs resume"
// finishes the run on the other coordinator: round 1 is not asked again,
// each charge ran exactly once, every id answered once.
func TestRunControlParkAndResume(t *testing.T) {
	t.Parallel()
	f := newParkFleet(t)
	c1 := f.serve("c1")
	run := f.submit("park-1", "p1")

	parked := f.waitResult(run, "parked")
	if !strings.Contains(parked.ParkReason, "HTTP 503") || strings.Contains(parked.ParkReason, "overloaded") {
		t.Fatalf("park reason %q, want the status and never the server's message", parked.ParkReason)
	}
	if msgs := answeredOnce(t, parked); len(msgs) != 3 {
		t.Fatalf("parked transcript %+v, want the prompt and round 1 answered", msgs)
	}
	if n := len(f.runsOf("p1-a")); n != 1 {
		t.Fatalf("charge a ran %d times before parking, want 1", n)
	}
	if st := f.state(run); st.Status != runs.StatusParked || st.Owner != "c1" || st.Round != 1 || st.Client != "client" {
		t.Fatalf("state %+v, want parked after round 1, last owned by c1, of the client", st)
	}
	if out := f.must("operator", "runs", "list", "--state", "parked"); !strings.Contains(out, string(run)) {
		t.Fatalf("runs list --state parked:\n%s", out)
	}
	if out := f.must("operator", "runs", "list", "--state", "running"); strings.Contains(out, string(run)) {
		t.Fatalf("runs list --state running lists the parked run:\n%s", out)
	}

	c1.kill()
	c2 := f.serve("c2")
	if st := f.state(run); st.Status != runs.StatusParked || st.Owners != 1 {
		t.Fatalf("state once c2 serves %+v, want still parked, taken by nobody", st)
	}

	// The client submits its parked run again, past the duplicate window
	// (a message id the window does not hold: the one a resume's
	// resubmission carries, forged): acknowledged, not run; only an
	// operator resumes it.
	cnc, _ := approvalConn(t, f.url, "client")
	again := nats.NewMsg("fleet.run.submit.client.default.park-1")
	again.Data = []byte(`{"prompt": "p1"}`)
	again.Header.Set(nats.MsgIdHdr, protocol.ResubmissionMsgID("client", "park-1", 1))
	again.Header.Set(protocol.HeaderAgent, protocol.DefaultAgent)
	if _, err := cnc.RequestMsg(again, 10*time.Second); err != nil {
		t.Fatalf("the client's second submission: %v", err)
	}
	cnc.Close()
	c2.waitLog(30*time.Second, "the run already has a result")
	if st := f.state(run); st.Status != runs.StatusParked || st.Owners != 1 {
		t.Fatalf("state after the client's second submission %+v, want still parked", st)
	}

	// Fail closed: the client may not resume, directly or with the CLI.
	nc, _ := approvalConn(t, f.url, "client")
	subject, _ := protocol.Subjects{}.JournalResume(run)
	req, _ := protocol.Encode(&protocol.RunResumeRequest{V: protocol.Version, RunID: run, By: "mallory"})
	if err := nc.Publish(subject, req); err != nil {
		t.Fatal(err)
	}
	nc.Flush()
	natstest.WaitFor(t, 10*time.Second, func() error {
		if err := nc.LastError(); err == nil || !strings.Contains(strings.ToLower(err.Error()), "permissions violation") {
			return fmt.Errorf("the client's resume request: %v, want a permissions violation", err)
		}
		return nil
	})
	nc.Close()
	if out, err := f.as("client", "runs", "resume", string(run), "--timeout", "5s"); err == nil {
		t.Fatalf("runs resume as the client succeeded:\n%s", out)
	}
	if st := f.state(run); st.Status != runs.StatusParked || st.Owners != 1 {
		t.Fatalf("state after the client's resume %+v, want still parked", st)
	}

	f.model.setDown(false)
	if out := f.must("operator", "runs", "resume", string(run), "--reason", "provider back"); !strings.Contains(out, "resumed by c2") {
		t.Fatalf("runs resume:\n%s", out)
	}
	res := f.waitResult(run, "natural")
	if res.Answer != "done p1" || res.Coordinator != "c2" || res.ParkReason != "" || res.ResumedBy != "" {
		t.Fatalf("resumed result: %q by %s, park reason %q", res.Answer, res.Coordinator, res.ParkReason)
	}
	answeredOnce(t, res)
	if a, b := len(f.runsOf("p1-a")), len(f.runsOf("p1-b")); a != 1 || b != 1 {
		t.Fatalf("charges ran a=%d b=%d times, want each exactly once", a, b)
	}
	if n := f.model.requests("p1", 1); n != 1 {
		t.Fatalf("round 1 asked %d times, want once (its response is journaled)", n)
	}
	if st := f.state(run); st.Status != runs.StatusFinished || st.Owner != "c2" || st.Owners != 2 {
		t.Fatalf("state %+v, want finished by c2, the second owner", st)
	}
	if _, err := f.as("operator", "runs", "resume", string(run), "--timeout", "5s"); err == nil {
		t.Fatal("a finished run was resumed")
	}
}
