package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/internal/testsync"
	"github.com/toolfleet/toolfleet/pkg/agent"
	"github.com/toolfleet/toolfleet/pkg/client"
	"github.com/toolfleet/toolfleet/pkg/fleettest"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// refunder is a stored agent the service serves on its script: it refunds
// order A-17, a call its operator must approve.
const refunder = `{"name": "refunder", "instructions": "Refund what the customer asks.",
	"model": {"provider": "scripted", "script": {"turns": [
		{"tool_calls": [{"id": "c1", "name": "refund", "arguments": {"order": "A-17"}}]},
		{"content": "{{result \"c1\"}}."}]}},
	"tools": ["refund"]}`

// TestServesItsAgentsAndTools builds the program and runs it as a process
// against a fleet listening on TCP, as the coordinator's and the worker's
// users: a client's run of the default agent and of a stored agent (whose
// refund the operator approves) are both served by that one process — its
// coordinator ran them and its worker ran their calls — and SIGTERM stops
// it with exit status 0.
func TestServesItsAgentsAndTools(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the program")
	}
	bin := filepath.Join(t.TempDir(), "fleetservice")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	def, err := agent.Parse([]byte(refunder))
	if err != nil {
		t.Fatal(err)
	}
	fleet := fleettest.Start(t, fleettest.Config{Listen: true, Agents: []agent.Definition{def}})

	var stdout, stderr testsync.Buffer
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "NATS_URL="+fleet.CoordinatorURL(), "WORKER_NATS_URL="+fleet.URL())
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("fleetservice's stderr:\n%s", stderr.String())
		}
	})
	testsync.WaitUntil(t, time.Minute, "the service serves its tools", func() bool {
		return strings.Contains(stdout.String(), "fleetservice: serving")
	})
	// Both names end with the process's id (the defaults: <hostname>-<pid>).
	pid := "-" + strconv.Itoa(cmd.Process.Pid)

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	c := fleet.Client()
	served := func(res *protocol.RunResult) *loop.Result {
		t.Helper()
		if !strings.HasSuffix(res.Coordinator, pid) {
			t.Fatalf("coordinator %q ran the run, want the service (pid %s)", res.Coordinator, pid[1:])
		}
		lr, err := client.LoopResult(res)
		if err != nil {
			t.Fatal(err)
		}
		c1, ok := lr.Call("c1")
		if !ok || c1.Outcome != protocol.OutcomeOK || !strings.HasSuffix(c1.Worker, pid) {
			t.Fatalf("c1 = %+v (found %v), want ok from the service's worker", c1, ok)
		}
		return lr
	}

	// The default agent, on the service's own model.
	run, err := c.Submit(ctx, client.Request{Prompt: "Where is order A-17?"})
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Wait(ctx, run)
	if err != nil {
		t.Fatal(err)
	}
	if lr := served(res); !strings.Contains(lr.Answer, `"status":"delivered"`) {
		t.Fatalf("answer %q, want the order's status", lr.Answer)
	}

	// A stored agent, its gated call approved by the operator.
	run, err = c.Submit(ctx, client.Request{Agent: "refunder", Prompt: "Refund order A-17."})
	if err != nil {
		t.Fatal(err)
	}
	operator, err := client.New(fleet.ConnectOperator(), client.Config{Prefix: fleet.Prefix()})
	if err != nil {
		t.Fatal(err)
	}
	req, err := operator.WaitApproval(ctx, client.ApprovalFilter{Run: run.ID})
	if err != nil || req.Tool != "refund" {
		t.Fatalf("WaitApproval = %+v, %v; want the refund's request", req, err)
	}
	if _, err := operator.Approve(ctx, req, client.Decision{Approver: "alice"}); err != nil {
		t.Fatal(err)
	}
	if res, err = c.Wait(ctx, run); err != nil {
		t.Fatal(err)
	}
	if lr := served(res); lr.Answer != "refunded A-17." {
		t.Fatalf("answer %q, want %q", lr.Answer, "refunded A-17.")
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		exited <- err // for the cleanup
		if err != nil {
			t.Fatalf("after SIGTERM: %v, want exit status 0", err)
		}
	case <-ctx.Done():
		t.Fatal("the service did not stop after SIGTERM")
	}
}
