package e2e

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natsbus/dispatch"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// An attack with the coordinator's credentials against the shipped
// deploy/nats-server.conf: calls of a tool whose manifest requires
// approval, published straight onto the calls stream — without an
// approval, and with a proof that points at another call's approval
// request — are refused by the real toolworker (denied) and never run.
func TestForgedApprovalsNeverRun(t *testing.T) {
	t.Parallel()
	srv := startApprovalServer(t)
	url := srv.ClientURL()
	dir := t.TempDir()
	out := filepath.Join(dir, "effects")
	if err := os.Mkdir(out, 0o755); err != nil {
		t.Fatal(err)
	}
	manifest := writeJSON(t, dir, "tools.json", map[string]any{"tools": []any{approvalEffectTool("deploy_a", out, true)}})
	worker := startProcEnv(t, "toolworker", approvalEnv(t, url, "worker"), bins.toolworker, "--tools", manifest, "--name", "w1")
	waitForApprovalCatalog(t, url, worker, "deploy_a")

	nc, js := approvalConn(t, url, "coordinator")
	defer nc.Close()
	subjects := protocol.Subjects{}
	if err := natsbus.EnsureStreams(t.Context(), js, subjects, natsbus.StreamConfig{}); err != nil {
		t.Fatalf("EnsureStreams as the coordinator: %v", err)
	}
	d := dispatch.NewDispatcher(nc, js, subjects, dispatch.DispatcherConfig{})
	run := protocol.NewRunID()
	in, err := d.Open(t.Context(), run)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()

	// A genuine-looking request for another call, stored with coordinator rights.
	other := protocol.NewCallKey()
	args := json.RawMessage(`{"target":"prod"}`)
	digest, _ := protocol.Digest(run, other, "deploy_a", args)
	reqSubj, _ := subjects.ApprovalRequest(run, other)
	decSubj, _ := subjects.ApprovalDecision(run, other)
	data, _ := protocol.Encode(&protocol.ApprovalRequest{V: 1, RunID: run, CallKey: other, Round: 1, Tool: "deploy_a",
		Arguments: args, Digest: digest, Deadline: time.Now().Add(time.Minute), DecisionSubject: decSubj})
	ack, err := js.Publish(t.Context(), reqSubj, data)
	if err != nil {
		t.Fatalf("storing a request: %v", err)
	}

	for name, proof := range map[string]*protocol.ApprovalProof{
		"no approval":            nil,
		"another call's request": {RequestSeq: ack.Sequence, DecisionSeq: ack.Sequence + 1},
	} {
		t.Run(name, func(t *testing.T) {
			call := protocol.Call{V: 1, RunID: run, Round: 1, CallKey: protocol.NewCallKey(), CallID: "c1", Tool: "deploy_a",
				Arguments: args, Deadline: time.Now().Add(20 * time.Second), Attempt: 1, Approval: proof}
			if err := d.Publish(t.Context(), loop.Outgoing{Call: call}); err != nil {
				t.Fatalf("Publish: %v", err)
			}
			res := waitResult(t, in, call.CallKey, 30*time.Second)
			if res.Outcome != protocol.OutcomeDenied {
				t.Fatalf("result %+v, want denied", res)
			}
			if _, err := os.Stat(filepath.Join(out, "deploy_a")); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("the tool ran: %v", err)
			}
		})
	}
	worker.waitLog(30*time.Second, "refused a call that needs approval")
}

// waitResult reads in until the result for key arrives.
func waitResult(t *testing.T, in loop.Inbox, key protocol.CallKey, within time.Duration) protocol.Result {
	t.Helper()
	timeout := time.After(within)
	for {
		select {
		case ev := <-in.Events():
			if ev.Result != nil && ev.Result.CallKey == key {
				return *ev.Result
			}
		case <-timeout:
			t.Fatalf("no result for %s within %v", key, within)
		}
	}
}
