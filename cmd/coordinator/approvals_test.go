package main

import (
	"bytes"
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/approval"
	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natstest"
	"github.com/toolfleet/toolfleet/internal/testsync"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// approvalFixture is a server with the fleet's streams, a coordinator
// connection running the approval gate and an operator connection.
type approvalFixture struct {
	url    string
	js     jetstream.JetStream
	op     *nats.Conn
	stream jetstream.Stream
	gate   *approval.Gate
}

func newApprovalFixture(t testing.TB) *approvalFixture {
	t.Helper()
	srv := natstest.Start(t)
	f := &approvalFixture{url: srv.ClientURL()}
	nc := natstest.Connect(t, srv)
	f.op = natstest.Connect(t, srv)
	var err error
	if f.js, err = jetstream.New(nc); err != nil {
		t.Fatal(err)
	}
	if err := natsbus.EnsureStreams(t.Context(), f.js, protocol.Subjects{}, natsbus.StreamConfig{}); err != nil {
		t.Fatalf("creating the fleet's streams: %v", err)
	}
	if f.stream, err = f.js.Stream(t.Context(), protocol.Subjects{}.ApprovalsStream()); err != nil {
		t.Fatal(err)
	}
	f.gate = approval.NewGate(nc, f.js, protocol.Subjects{}, approval.GateConfig{})
	return f
}

// approveResult is what the gate answered a call.
type approveResult struct {
	d   loop.Decision
	err error
}

// approveAsync asks the gate for req's approval in a goroutine.
func (f *approvalFixture) approveAsync(ctx context.Context, req protocol.ApprovalRequest) <-chan approveResult {
	ch := make(chan approveResult, 1)
	go func() {
		d, err := f.gate.Approve(ctx, req)
		ch <- approveResult{d, err}
	}()
	return ch
}

// decide publishes a decision for req from the operator connection.
func (f *approvalFixture) decide(t testing.TB, req protocol.ApprovalRequest, d protocol.ApprovalDecision) {
	t.Helper()
	data, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	subj, err := protocol.Subjects{}.ApprovalDecision(req.RunID, req.CallKey)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.op.Publish(subj, data); err != nil {
		t.Fatalf("publish decision: %v", err)
	}
	if err := f.op.Flush(); err != nil {
		t.Fatalf("flush: %v", err)
	}
}

// countMsgs counts the approvals stream's messages on subj.
func (f *approvalFixture) countMsgs(t testing.TB, subj string) uint64 {
	t.Helper()
	info, err := f.stream.Info(t.Context(), jetstream.WithSubjectFilter(subj))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Subjects[subj]
}

// newApprovalRequest builds a request for a fresh call key.
func newApprovalRequest(run protocol.RunID, tool protocol.ToolName, args string, ttl time.Duration) protocol.ApprovalRequest {
	return protocol.ApprovalRequest{
		V: protocol.Version, RunID: run, CallKey: protocol.NewCallKey(), CallID: "call_1", Round: 1,
		Tool: tool, Arguments: json.RawMessage(args), Deadline: time.Now().Add(ttl),
	}
}

func digestOf(t testing.TB, req protocol.ApprovalRequest) string {
	t.Helper()
	d, err := protocol.Digest(req.RunID, req.CallKey, req.Tool, req.Arguments)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func recv[T any](t testing.TB, ch <-chan T, timeout time.Duration) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(timeout):
		var zero T
		t.Fatalf("nothing received within %v", timeout)
		return zero
	}
}

// sansProof checks that an approval carries a proof of its decision (and a
// denial none) and returns d without it, for comparison.
func sansProof(t testing.TB, d loop.Decision) loop.Decision {
	t.Helper()
	if d.Approved != (d.Proof != nil) {
		t.Errorf("Decision %+v: an approval, and only one, carries a proof", d)
	}
	d.Proof = nil
	return d
}

// runApprovals runs "coordinator approvals" against f's server as an
// operator would.
func runApprovals(t testing.TB, f *approvalFixture, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	dial := func(ctx context.Context) (*nats.Conn, error) { return nats.Connect(f.url) }
	code = approvals.run(t.Context(), args, &out, &errb, dial)
	return code, out.String(), errb.String()
}

// waiting starts an approval and returns it once the request is stored.
func (f *approvalFixture) waiting(t testing.TB, args string, ttl time.Duration) (protocol.ApprovalRequest, <-chan approveResult) {
	t.Helper()
	req := newApprovalRequest("run1", "deploy", args, ttl)
	res := f.approveAsync(t.Context(), req)
	subj := "fleet.approval.request.run1." + string(req.CallKey)
	testsync.WaitFor(t, 5*time.Second, func() error {
		_, err := f.stream.GetLastMsgForSubject(context.Background(), subj)
		return err
	})
	req.Digest = digestOf(t, req)
	return req, res
}

func TestApprovalsUsage(t *testing.T) {
	dialed := false
	dial := func(context.Context) (*nats.Conn, error) { dialed = true; return nil, context.Canceled }
	tests := []struct {
		name string
		args []string
		want int
	}{
		{"no command", nil, 2},
		{"unknown command", []string{"frobnicate"}, 2},
		{"help", []string{"help"}, 0},
		{"flag help", []string{"approve", "-h"}, 0},
		{"approve without key", []string{"approve", "run1"}, 2},
		{"approve with extra argument", []string{"approve", "run1", "key1", "more"}, 2},
		{"run not a token", []string{"approve", "run.1", "key1"}, 2},
		{"key wildcard", []string{"approve", "run1", ">"}, 2},
		{"deny without reason", []string{"deny", "run1", "key1"}, 2},
		{"reason too long", []string{"deny", "run1", "key1", "--reason", strings.Repeat("x", 501)}, 2},
		{"unknown flag", []string{"list", "--color"}, 2},
		{"bad output", []string{"list", "--output", "yaml"}, 2},
		{"bad prefix", []string{"list", "--prefix", "a.b"}, 2},
		{"list with argument", []string{"list", "extra"}, 2},
		{"leading approvals word", []string{"approvals", "deny", "run1", "key1"}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			if got := approvals.run(t.Context(), tt.args, &out, &errb, dial); got != tt.want {
				t.Errorf("exit=%d, want %d (stderr %q)", got, tt.want, errb.String())
			}
			if dialed {
				t.Error("connected to NATS for a usage error")
			}
		})
	}
}

func TestApprovalsParsesInterspersedFlags(t *testing.T) {
	f := newApprovalFixture(t)
	req, res := f.waiting(t, `{"env":"prod"}`, 5*time.Second)
	code, out, errs := runApprovals(t, f, "deny", "--approver", "carol", "run1", "--reason", "wrong env", string(req.CallKey), "--wait", "2s")
	if code != 0 {
		t.Fatalf("exit=%d, stdout %q, stderr %q", code, out, errs)
	}
	r := recv(t, res, 5*time.Second)
	if want := (loop.Decision{Reason: "wrong env", Approver: "carol"}); r.err != nil || r.d != want {
		t.Fatalf("Decision=%+v, %v; want %+v", r.d, r.err, want)
	}
	if !strings.Contains(out, "coordinator recorded: denied") {
		t.Errorf("stdout does not confirm the outcome: %s", out)
	}
}

func TestApprovalsApproveAndDeny(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want loop.Decision
		note string
	}{
		{"approve", []string{"approve", "run1", "KEY", "--approver", "alice"}, loop.Decision{Approved: true, Approver: "alice"}, "approved"},
		{"approve as $USER", []string{"approve", "run1", "KEY"}, loop.Decision{Approved: true, Approver: "ops-user"}, "approved"},
		{"deny", []string{"deny", "run1", "KEY", "--reason", "too risky", "--approver", "bob"}, loop.Decision{Reason: "too risky", Approver: "bob"}, "denied"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("USER", "ops-user")
			f := newApprovalFixture(t)
			req, res := f.waiting(t, `{"env":"prod","replicas":3}`, 5*time.Second)
			args := append([]string(nil), tt.args...)
			args[2] = string(req.CallKey)
			code, out, errs := runApprovals(t, f, args...)
			if code != 0 {
				t.Fatalf("exit=%d, stdout %q, stderr %q", code, out, errs)
			}
			r := recv(t, res, 5*time.Second)
			if r.err != nil || sansProof(t, r.d) != tt.want {
				t.Fatalf("Decision=%+v, %v; want %+v", r.d, r.err, tt.want)
			}
			for _, want := range []string{"tool:      deploy", `arguments: {"env":"prod","replicas":3}`, "digest:    " + req.Digest, "coordinator recorded: " + tt.note} {
				if !strings.Contains(out, want) {
					t.Errorf("stdout lacks %q:\n%s", want, out)
				}
			}

			// The request is settled: a second decision is refused.
			code, out, errs = runApprovals(t, f, args...)
			if code != 1 || !strings.Contains(errs, "already settled: "+tt.note) {
				t.Errorf("second decision: exit=%d stderr=%q, want 1 and already settled", code, errs)
			}
			if !strings.Contains(out, "digest:    "+req.Digest) {
				t.Errorf("a refused decision should still show the request:\n%s", out)
			}
		})
	}
}

// A decision no coordinator acts on (its coordinator is gone, the request
// still within its deadline) is published, but the command fails: the
// operator must not believe the call was decided.
func TestApprovalsFailsWhenNoCoordinatorActs(t *testing.T) {
	f := newApprovalFixture(t)
	orphan := newApprovalRequest("run1", "deploy", `{}`, time.Hour)
	orphan.Digest = digestOf(t, orphan)
	orphan.DecisionSubject = "fleet.approval.decision.run1." + string(orphan.CallKey)
	data, _ := protocol.Encode(&orphan)
	if _, err := f.js.Publish(t.Context(), "fleet.approval.request.run1."+string(orphan.CallKey), data); err != nil {
		t.Fatal(err)
	}
	code, out, errs := runApprovals(t, f, "approve", "run1", string(orphan.CallKey), "--wait", "300ms")
	if code == 0 || !strings.Contains(errs, "no coordinator recorded an outcome") {
		t.Fatalf("exit=%d stdout=%q stderr=%q, want a failure saying no coordinator acted", code, out, errs)
	}
	if !strings.Contains(out, "decision published") {
		t.Errorf("stdout should still say the decision was published:\n%s", out)
	}
}

func TestApprovalsRefuses(t *testing.T) {
	f := newApprovalFixture(t)
	ctx := t.Context()

	code, _, errs := runApprovals(t, f, "approve", "run1", "nosuchkey")
	if code != 1 || !strings.Contains(errs, "no approval request") {
		t.Errorf("unknown request: exit=%d stderr=%q, want 1", code, errs)
	}

	// A request whose coordinator died: no note, deadline passed.
	stale := newApprovalRequest("run1", "deploy", `{}`, -time.Minute)
	stale.Digest = digestOf(t, stale)
	stale.DecisionSubject = "fleet.approval.decision.run1." + string(stale.CallKey)
	data, _ := protocol.Encode(&stale)
	if _, err := f.js.Publish(ctx, "fleet.approval.request.run1."+string(stale.CallKey), data); err != nil {
		t.Fatal(err)
	}
	code, _, errs = runApprovals(t, f, "approve", "run1", string(stale.CallKey))
	if code != 1 || !strings.Contains(errs, "expired") {
		t.Errorf("expired request: exit=%d stderr=%q, want 1 and expired", code, errs)
	}

	// A request the gate let expire (a TTL long enough for the request to
	// be stored first on a loaded machine).
	req, res := f.waiting(t, `{}`, time.Second)
	if r := recv(t, res, 30*time.Second); !r.d.Expired {
		t.Fatalf("Decision=%+v, want expired", r.d)
	}
	code, _, errs = runApprovals(t, f, "deny", "run1", string(req.CallKey), "--reason", "late")
	if code != 1 || !strings.Contains(errs, "already settled: expired") {
		t.Errorf("expired by the gate: exit=%d stderr=%q, want 1", code, errs)
	}
	if n := f.countMsgs(t, "fleet.approval.decision.run1."+string(req.CallKey)); n != 0 {
		t.Errorf("%d decisions published for a settled request, want 0", n)
	}
}

func TestApprovalsList(t *testing.T) {
	f := newApprovalFixture(t)
	code, out, errs := runApprovals(t, f, "list")
	if code != 0 || !strings.Contains(out, "no pending approval requests") {
		t.Fatalf("empty list: exit=%d stdout=%q stderr=%q", code, out, errs)
	}

	// Two pending (the second with hostile text), one settled, one expired.
	p1, _ := f.waiting(t, `{"env":"prod"}`, 60*time.Second)
	p2, _ := f.waiting(t, `{"cmd":"\u001b[2Jrm -rf /","note":"a\u202eb","ok":"héllo"}`, 50*time.Second)
	settled, res := f.waiting(t, `{"x":1}`, 5*time.Second)
	approved := true
	f.decide(t, settled, protocol.ApprovalDecision{Digest: settled.Digest, Approved: &approved})
	recv(t, res, 5*time.Second)
	// expired by the gate (a TTL long enough for the request to be stored
	// first on a loaded machine)
	expired, res := f.waiting(t, `{"x":2}`, time.Second)
	if r := recv(t, res, 30*time.Second); !r.d.Expired {
		t.Fatalf("Decision=%+v, want expired", r.d)
	}

	code, out, errs = runApprovals(t, f, "list", "--approver", "alice")
	if code != 0 {
		t.Fatalf("exit=%d stderr=%q", code, errs)
	}
	if !strings.Contains(out, "2 pending approval request(s)") {
		t.Errorf("want 2 pending:\n%s", out)
	}
	for _, key := range []string{string(settled.CallKey), string(expired.CallKey)} {
		if strings.Contains(out, key) {
			t.Errorf("list shows settled or expired request %s:\n%s", key, out)
		}
	}
	// Soonest deadline first.
	if i1, i2 := strings.Index(out, string(p1.CallKey)), strings.Index(out, string(p2.CallKey)); i2 < 0 || i1 < 0 || i2 > i1 {
		t.Errorf("want %s (earlier deadline) before %s:\n%s", p2.CallKey, p1.CallKey, out)
	}
	wantLines := []string{
		"run:       run1",
		"key:       " + string(p1.CallKey),
		"tool:      deploy",
		`arguments: {"env":"prod"}`,
		"digest:    " + p1.Digest,
		`approve:   nats pub fleet.approval.decision.run1.` + string(p1.CallKey) + ` '{"digest":"` + p1.Digest + `","approved":true,"approver":"alice"}'`,
		`deny:      nats pub fleet.approval.decision.run1.` + string(p1.CallKey) + ` '{"digest":"` + p1.Digest + `","approved":false,"reason":"REASON","approver":"alice"}'`,
		`arguments: {"cmd":"\u001b[2Jrm -rf /","note":"a\u202eb","ok":"héllo"}`,
	}
	for _, w := range wantLines {
		if !strings.Contains(out, w) {
			t.Errorf("list lacks %q:\n%s", w, out)
		}
	}
	if regexp.MustCompile("[\x1b\u202e]").MatchString(out) {
		t.Errorf("list prints terminal control or bidi characters raw:\n%q", out)
	}

	code, out, errs = runApprovals(t, f, "list", "--output", "json")
	if code != 0 {
		t.Fatalf("exit=%d stderr=%q", code, errs)
	}
	var got struct{ Pending []listedRequest }
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("list --output json: %v\n%s", err, out)
	}
	if len(got.Pending) != 2 || got.Pending[1].CallKey != p1.CallKey || got.Pending[1].Digest != p1.Digest ||
		string(got.Pending[1].Arguments) != `{"env":"prod"}` || got.Pending[1].DecisionSubject != "fleet.approval.decision.run1."+string(p1.CallKey) {
		t.Errorf("json pending=%+v", got.Pending)
	}
}

func TestApprovalsConnectFailure(t *testing.T) {
	dial := func(context.Context) (*nats.Conn, error) { return nil, nats.ErrNoServers }
	var out, errb bytes.Buffer
	if code := approvals.run(t.Context(), []string{"list"}, &out, &errb, dial); code != 1 || !strings.Contains(errb.String(), "connecting to NATS") {
		t.Errorf("exit=%d stderr=%q, want 1", code, errb.String())
	}
}
