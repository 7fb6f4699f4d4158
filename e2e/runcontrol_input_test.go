package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/internal/natscli"
	"github.com/toolfleet/toolfleet/internal/natstest"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/model/openai/openaitest"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// New input to a run in flight with real processes, on the shipped
// deploy/nats-server.conf with its users: an OpenAI-compatible model
// server, a serving coordinator, one worker that runs one call at a time
// of the charge tool (not idempotent; sidefx records every execution).

// inputCharges are round 1's calls: each charges for a while, so while
// the worker runs the first it took, the others wait in the calls stream.
var inputCharges = []string{"x1", "x2", "x3", "x4"}

// inputModel asks in round 1 for every inputCharges charge, in round 2 for
// one more short charge ("y1"), and then answers "done". It keeps every
// request's messages, by round.
type inputModel struct {
	mu   sync.Mutex
	reqs map[int][]openaitest.Message
}

func (m *inputModel) request(round int) []openaitest.Message {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.reqs[round]
}

func (m *inputModel) handle(_ int, req *openaitest.Request) openaitest.Reply {
	run, round := "", 1
	for _, msg := range req.Messages {
		switch {
		case msg.Role == "user" && run == "":
			run = msg.Text()
		case msg.Role == "assistant":
			round++
		}
	}
	m.mu.Lock()
	m.reqs[round] = req.Messages
	m.mu.Unlock()
	tc := func(id string, sleep int) loop.ToolCall {
		args, _ := json.Marshal(map[string]any{"id": run + "-" + id, "sleep_ms": sleep, "output": "charged " + id})
		return loop.ToolCall{ID: id, Type: "function", Function: loop.FunctionCall{Name: toolCharge, Arguments: string(args)}}
	}
	switch round {
	case 1:
		var calls []loop.ToolCall
		for _, id := range inputCharges {
			calls = append(calls, tc(id, 15000))
		}
		return openaitest.Reply{ToolCalls: calls}
	case 2:
		return openaitest.Reply{ToolCalls: []loop.ToolCall{tc("y1", 3000)}}
	default:
		return openaitest.Reply{Content: "done " + run}
	}
}

// toolIDs returns the call ids the tool messages of msgs answer, in order,
// and the last message.
func toolIDs(msgs []openaitest.Message) (ids []string, last openaitest.Message) {
	for _, m := range msgs {
		if m.Role == "tool" {
			ids = append(ids, m.ToolCallID)
		}
	}
	return ids, msgs[len(msgs)-1]
}

// TestRunControlInput: a client interrupts its run while round 1's first
// charge runs and the three others wait behind it (one worker, one call
// at a time): the waiting charges are withdrawn and answered interrupted
// and never start, the running one finishes once; the model's next
// request answers every id of the round and then has the new message.
// In round 2 the client enqueues a message: the round's charge runs as it
// would, and the model's round-3 request has it after the charge's
// answer. No other client may send input to the run (bob, a second
// client account: refused by the server on the client's subject, refused
// by the coordinator on his own), nor a worker or the operator (refused
// by the server), and a run that ended takes none.
func TestRunControlInput(t *testing.T) {
	t.Parallel()
	srv := startServerWithBob(t) // the shipped conf, and a second client account, bob
	f := &parkFleet{url: srv.ClientURL()}
	f.fleet = &fleet{t: t, dir: t.TempDir()}
	f.effects = filepath.Join(f.dir, "effects.log")
	manifest := writeJSON(t, f.dir, "tools.json", map[string]any{"tools": []any{
		map[string]any{"name": toolCharge, "description": "records its runs", "parameters": json.RawMessage(sidefxSchema),
			"timeout": "60s", "command": []string{bins.sidefx}, "env": map[string]string{"SIDEFX_LOG": f.effects}},
	}})
	worker := startProcEnv(t, "toolworker", approvalEnv(t, f.url, "worker"), bins.toolworker, "--tools", manifest,
		"--name", "w1", "--concurrency", "1")
	waitForApprovalCatalog(t, f.url, worker, toolCharge)
	model := &inputModel{reqs: map[int][]openaitest.Message{}}
	f.urls = openaitest.NewServer(t, model.handle).URL
	_, js := approvalConn(t, f.url, "operator")
	kv, err := js.KeyValue(t.Context(), protocol.Subjects{}.RunsBucket())
	if err != nil {
		t.Fatal(err)
	}
	f.results = kv
	c1 := f.serve("c1")
	run := f.submit("input-1", "in1")

	// The worker took one charge; the others wait for it.
	var first string
	natstest.WaitFor(t, 60*time.Second, func() error {
		rs := f.runs()
		if len(rs) == 0 {
			return fmt.Errorf("no charge started")
		}
		first = strings.TrimPrefix(rs[0].id, "in1-")
		return nil
	})

	// Fail closed: no other client may send input to the run: bob may not
	// publish on the client's subject (the server refuses it), and what he
	// sends on his own reaches a coordinator that refuses it, unanswered.
	bobRun := func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bins.coordinator, args...)
		cmd.Env = append(natscli.Env(t), "NATS_URL="+f.url, "NATS_USER=bob", "NATS_PASSWORD="+bobPassword)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := bobRun("runs", "input", string(run), "--interrupt", "--text", "hijack", "--client", "client", "--timeout", "5s"); err == nil ||
		!strings.Contains(strings.ToLower(out), "permissions violation") {
		t.Fatalf("bob's runs input on the client's subject: %v\n%s\nwant refused by the server", err, out)
	}
	if out, err := bobRun("runs", "input", string(run), "--interrupt", "--text", "hijack", "--timeout", "5s"); err == nil ||
		!strings.Contains(out, "no coordinator runs the run") {
		t.Fatalf("bob's runs input on his own subject: %v\n%s\nwant unanswered", err, out)
	}
	c1.waitLog(30*time.Second, "refused an input to a run from another client than the run's")
	// Nor may a user of the fleet's own account.
	for _, user := range []string{"worker", "operator"} {
		if out, err := f.as(user, "runs", "input", string(run), "--interrupt", "--text", "hijack", "--client", "client", "--timeout", "5s"); err == nil ||
			!strings.Contains(strings.ToLower(out), "permissions violation") {
			t.Fatalf("runs input as %s: %v\n%s\nwant refused by the server", user, err, out)
		}
	}
	nc, _ := approvalConn(t, f.url, "worker")
	subject, _ := protocol.Subjects{}.RunInput("client", run)
	if err := nc.Publish(subject, []byte(`{"v":1,"run_id":"`+string(run)+`","mode":"interrupt","content":"hijack"}`)); err != nil {
		t.Fatal(err)
	}
	nc.Flush()
	natstest.WaitFor(t, 10*time.Second, func() error {
		if err := nc.LastError(); err == nil || !strings.Contains(strings.ToLower(err.Error()), "permissions violation") {
			return fmt.Errorf("the worker's input: %v, want a permissions violation", err)
		}
		return nil
	})
	nc.Close()

	if out := f.must("client", "runs", "input", string(run), "--interrupt", "--text", "stop charging"); !strings.Contains(out, "took the input (interrupt)") {
		t.Fatalf("runs input --interrupt:\n%s", out)
	}
	// Round 2's charge runs once round 1 is answered: enqueue while it runs.
	f.waitStarted("in1-y1", 1, 60*time.Second)
	if out := f.must("client", "runs", "input", string(run), "--enqueue", "--text", "also refund"); !strings.Contains(out, "took the input (enqueue)") {
		t.Fatalf("runs input --enqueue:\n%s", out)
	}
	res := f.waitResult(run, "natural")
	answeredOnce(t, res)
	if res.Answer != "done in1" {
		t.Fatalf("answer %q", res.Answer)
	}

	// No withdrawn charge ever started; the one that ran, ran once.
	for _, id := range inputCharges {
		n := len(f.runsOf("in1-" + id))
		switch {
		case id == first && n != 1:
			t.Errorf("charge %s (running when interrupted) ran %d times, want once", id, n)
		case id != first && n != 0:
			t.Errorf("charge %s (withdrawn) started %d times, want never", id, n)
		}
	}
	if n := len(f.runsOf("in1-y1")); n != 1 {
		t.Errorf("round 2's charge ran %d times, want once", n)
	}
	var calls []loop.CallRecord
	if err := json.Unmarshal(res.Calls, &calls); err != nil || len(calls) != len(inputCharges)+1 {
		t.Fatalf("calls %s: %v", res.Calls, err)
	}
	for _, c := range calls {
		want := protocol.OutcomeInterrupted
		if c.CallID == first || c.CallID == "y1" {
			want = protocol.OutcomeOK
		}
		if c.Outcome != want {
			t.Errorf("call %s: %s, want %s", c.CallID, c.Outcome, want)
		}
	}

	// The model saw every id of round 1 answered, then the interrupt.
	ids, last := toolIDs(model.request(2))
	if !slices.Equal(ids, inputCharges) || last.Role != "user" || last.Text() != "stop charging" {
		t.Fatalf("round 2's request: tool messages for %v, last %s %q", ids, last.Role, last.Text())
	}
	ids, last = toolIDs(model.request(3))
	if !slices.Equal(ids, append(slices.Clone(inputCharges), "y1")) || last.Role != "user" || last.Text() != "also refund" {
		t.Fatalf("round 3's request: tool messages for %v, last %s %q", ids, last.Role, last.Text())
	}

	// A run that ended takes no input.
	if out, err := f.as("client", "runs", "input", string(run), "--enqueue", "--text", "late", "--timeout", "3s"); err == nil ||
		!strings.Contains(out, "no coordinator runs the run") {
		t.Fatalf("runs input to an ended run: %v\n%s", err, out)
	}
}
