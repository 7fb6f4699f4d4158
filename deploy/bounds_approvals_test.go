package deploy

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/testsync"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// newRequest returns an approval request of a fresh call of tool, with
// deadline, as the coordinator's gate writes it, its subject and its data.
func newRequest(t *testing.T, tool protocol.ToolName, deadline time.Time) (protocol.ApprovalRequest, string, []byte) {
	t.Helper()
	subjects := protocol.Subjects{}
	run, key := protocol.NewRunID(), protocol.NewCallKey()
	args := json.RawMessage(`{"target":"prod"}`)
	digest, _ := protocol.Digest(run, key, tool, args)
	reqSubj, _ := subjects.ApprovalRequest(run, key)
	decSubj, _ := subjects.ApprovalDecision(run, key)
	req := protocol.ApprovalRequest{V: 1, RunID: run, CallKey: key, Round: 1, Tool: tool,
		Arguments: args, Digest: digest, Deadline: deadline, DecisionSubject: decSubj}
	data, err := protocol.Encode(&req)
	if err != nil {
		t.Fatal(err)
	}
	return req, reqSubj, data
}

// storeRequest stores an approval request of a fresh call of tool, with
// deadline, as the coordinator's gate does, and returns it.
func storeRequest(t *testing.T, coord client, tool protocol.ToolName, deadline time.Time) protocol.ApprovalRequest {
	t.Helper()
	req, subj, data := newRequest(t, tool, deadline)
	if _, err := coord.js.Publish(t.Context(), subj, data); err != nil {
		t.Fatalf("coordinator: storing a request: %v", err)
	}
	return req
}

// listsPending runs "coordinator approvals list --output json" as the
// operator and reports whether it lists req.
func listsPending(t *testing.T, s serverOf, req protocol.ApprovalRequest) bool {
	t.Helper()
	code, out, errb := coordinatorAs(t, s.ClientURL(), "operator", "approvals", "list", "--output", "json", "--timeout", "60s")
	if code != 0 {
		t.Fatalf("approvals list: exit %d: %s", code, errb)
	}
	var got struct {
		Pending []struct {
			RunID   protocol.RunID   `json:"run_id"`
			CallKey protocol.CallKey `json:"call_key"`
		} `json:"pending"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("approvals list: %v: %s", err, out)
	}
	for _, p := range got.Pending {
		if p.RunID == req.RunID && p.CallKey == req.CallKey {
			return true
		}
	}
	return false
}

// Attack 1's consequence, with the approvals stream full (filled by the
// operator, within a small bound provisioned through the same code path):
// "coordinator tools pause" and "tools limit" still work — their records
// go to the traffic stream, FLEET_TRAFFIC, which only operators write and
// which never refuses for want of room — and "tools history" shows them;
// "approvals list" still shows the request stored before the flood.
func TestConfKillSwitchWithTheAuditLogFull(t *testing.T) {
	t.Parallel()
	srv := startFromConf(t)
	s := serverOf{srv}
	admin := connectAs(t, srv, "admin")
	subjects := protocol.Subjects{}
	if _, err := natsbus.Provision(t.Context(), admin.js, subjects, natsbus.StreamConfig{ApprovalsMaxMsgs: 1_000}); err != nil {
		t.Fatalf("admin provisioning the fleet: %v", err)
	}
	worker := connectAs(t, srv, "worker")
	cfg := jetstream.ConsumerConfig{Durable: "tool_echo", FilterSubject: "fleet.call.echo.interactive.*", AckPolicy: jetstream.AckExplicitPolicy}
	if _, err := worker.js.CreateOrUpdateConsumer(t.Context(), subjects.CallsStream(), cfg); err != nil {
		t.Fatalf("worker creating its tool consumer: %v", err)
	}
	coord := connectAs(t, srv, "coordinator")
	req := storeRequest(t, coord, "deploy", time.Now().Add(30*time.Minute))

	operator := connectAs(t, srv, "operator")
	flood(t, operator, 2_000, nil, func(i int) string { return fmt.Sprintf("fleet.approval.decision.x%d.y%d", i, i) })
	if !refusedFull(t, operator, subjects.ApprovalsStream(), "fleet.approval.decision.x.last") {
		t.Fatalf("%s is not full (%d messages)", subjects.ApprovalsStream(), msgsIn(t, admin, subjects.ApprovalsStream()))
	}

	for _, args := range [][]string{
		{"pause", "echo", "--reason", "runaway cost", "--by", "ann"},
		{"limit", "echo", "--rate", "5", "--burst", "2", "--reason", "vendor quota", "--by", "ann"},
	} {
		if code, _, errb := coordinatorAs(t, s.ClientURL(), "operator", append([]string{"tools"}, args...)...); code != 0 {
			t.Fatalf("tools %s with the audit log full: exit %d: %s", strings.Join(args, " "), code, errb)
		}
	}
	c, err := worker.js.Consumer(t.Context(), subjects.CallsStream(), "tool_echo")
	if err != nil || !c.CachedInfo().Paused {
		t.Fatalf("tool_echo after tools pause: %v, paused %v", err, err == nil && c.CachedInfo().Paused)
	}
	if code, out, errb := coordinatorAs(t, s.ClientURL(), "operator", "tools", "history", "echo"); code != 0 ||
		!strings.Contains(out, "pause  echo") || !strings.Contains(out, "limit  echo rate 5/s burst 2") {
		t.Fatalf("tools history: exit %d: %s%s", code, out, errb)
	}
	if !listsPending(t, s, req) {
		t.Fatal("approvals list does not show the pending request")
	}
}

// "approvals list" shows a pending request stored after thousands of
// decided requests and 200,000 other messages (junk decisions, as attack 1
// stored them): it reads the requests, and then only the decisions and
// outcomes of those still open, never the whole stream from its start.
func TestConfApprovalsListFindsPendingBehindAFlood(t *testing.T) {
	t.Parallel()
	srv := startFromConf(t)
	s := serverOf{srv}
	provision(t, srv)
	subjects := protocol.Subjects{}
	coord := connectAs(t, srv, "coordinator")
	operator := connectAs(t, srv, "operator")

	const decided = 200
	stored := func(n int) func() error {
		return func() error {
			if got := msgsIn(t, operator, subjects.ApprovalsStream()); got < uint64(n) {
				return fmt.Errorf("the approvals stream holds %d messages, want %d", got, n)
			}
			return nil
		}
	}
	var reqs []protocol.ApprovalRequest
	for range decided {
		req, subj, data := newRequest(t, "deploy", time.Now().Add(30*time.Minute))
		if err := coord.nc.Publish(subj, data); err != nil {
			t.Fatal(err)
		}
		reqs = append(reqs, req)
	}
	testsync.WaitFor(t, 2*time.Minute, stored(decided)) // each decision after its request
	for _, r := range reqs {
		if err := operator.nc.Publish(r.DecisionSubject, []byte(`{"digest":"`+r.Digest+`","approved":false,"approver":"alice","reason":"no"}`)); err != nil {
			t.Fatal(err)
		}
	}
	flood(t, operator, 200_000, nil, func(i int) string { return fmt.Sprintf("fleet.approval.decision.x%d.y%d", i, i) })
	testsync.WaitFor(t, 2*time.Minute, stored(2*decided+200_000))
	pending := storeRequest(t, coord, "deploy", time.Now().Add(30*time.Minute))
	if !listsPending(t, s, pending) {
		t.Fatal("approvals list does not show the request stored after the flood")
	}
	if listsPending(t, s, reqs[0]) {
		t.Fatal("approvals list shows a denied request as pending")
	}
}
