package approval

import (
	"bytes"
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolfleet/toolfleet/internal/testsync"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// runCommand runs Command against f's server as an operator would.
func runCommand(t testing.TB, f *fixture, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	dial := func(ctx context.Context) (*nats.Conn, error) { return nats.Connect(f.srv.ClientURL()) }
	code = Command(t.Context(), args, &out, &errb, dial)
	return code, out.String(), errb.String()
}

// waiting starts an approval and returns it once the request is stored.
func (f *fixture) waiting(t testing.TB, args string, ttl time.Duration) (protocol.ApprovalRequest, <-chan approveResult) {
	t.Helper()
	req := newRequest(t, "run1", "deploy", args, ttl)
	res := f.approveAsync(t.Context(), req)
	subj := "fleet.approval.request.run1." + string(req.CallKey)
	testsync.WaitFor(t, 5*time.Second, func() error {
		_, err := f.stream.GetLastMsgForSubject(context.Background(), subj)
		return err
	})
	req.Digest = digestOf(t, req)
	return req, res
}

func TestCommandUsage(t *testing.T) {
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
			if got := Command(t.Context(), tt.args, &out, &errb, dial); got != tt.want {
				t.Errorf("exit=%d, want %d (stderr %q)", got, tt.want, errb.String())
			}
			if dialed {
				t.Error("connected to NATS for a usage error")
			}
		})
	}
}

func TestCommandParsesInterspersedFlags(t *testing.T) {
	f := newFixture(t, GateConfig{})
	req, res := f.waiting(t, `{"env":"prod"}`, 5*time.Second)
	code, out, errs := runCommand(t, f, "deny", "--approver", "carol", "run1", "--reason", "wrong env", string(req.CallKey), "--wait", "2s")
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

func TestCommandApproveAndDeny(t *testing.T) {
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
			f := newFixture(t, GateConfig{})
			req, res := f.waiting(t, `{"env":"prod","replicas":3}`, 5*time.Second)
			args := append([]string(nil), tt.args...)
			args[2] = string(req.CallKey)
			code, out, errs := runCommand(t, f, args...)
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
			code, out, errs = runCommand(t, f, args...)
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
func TestCommandFailsWhenNoCoordinatorActs(t *testing.T) {
	f := newFixture(t, GateConfig{})
	orphan := newRequest(t, "run1", "deploy", `{}`, time.Hour)
	orphan.Digest = digestOf(t, orphan)
	orphan.DecisionSubject = "fleet.approval.decision.run1." + string(orphan.CallKey)
	data, _ := protocol.Encode(&orphan)
	if _, err := f.js.Publish(t.Context(), "fleet.approval.request.run1."+string(orphan.CallKey), data); err != nil {
		t.Fatal(err)
	}
	code, out, errs := runCommand(t, f, "approve", "run1", string(orphan.CallKey), "--wait", "300ms")
	if code == 0 || !strings.Contains(errs, "no coordinator recorded an outcome") {
		t.Fatalf("exit=%d stdout=%q stderr=%q, want a failure saying no coordinator acted", code, out, errs)
	}
	if !strings.Contains(out, "decision published") {
		t.Errorf("stdout should still say the decision was published:\n%s", out)
	}
}

func TestCommandRefuses(t *testing.T) {
	f := newFixture(t, GateConfig{})
	ctx := t.Context()

	code, _, errs := runCommand(t, f, "approve", "run1", "nosuchkey")
	if code != 1 || !strings.Contains(errs, "no approval request") {
		t.Errorf("unknown request: exit=%d stderr=%q, want 1", code, errs)
	}

	// A request whose coordinator died: no note, deadline passed.
	stale := newRequest(t, "run1", "deploy", `{}`, -time.Minute)
	stale.Digest = digestOf(t, stale)
	stale.DecisionSubject = "fleet.approval.decision.run1." + string(stale.CallKey)
	data, _ := protocol.Encode(&stale)
	if _, err := f.js.Publish(ctx, "fleet.approval.request.run1."+string(stale.CallKey), data); err != nil {
		t.Fatal(err)
	}
	code, _, errs = runCommand(t, f, "approve", "run1", string(stale.CallKey))
	if code != 1 || !strings.Contains(errs, "expired") {
		t.Errorf("expired request: exit=%d stderr=%q, want 1 and expired", code, errs)
	}

	// A request the gate let expire (a TTL long enough for the request to
	// be stored first on a loaded machine).
	req, res := f.waiting(t, `{}`, time.Second)
	if r := recv(t, res, 30*time.Second); !r.d.Expired {
		t.Fatalf("Decision=%+v, want expired", r.d)
	}
	code, _, errs = runCommand(t, f, "deny", "run1", string(req.CallKey), "--reason", "late")
	if code != 1 || !strings.Contains(errs, "already settled: expired") {
		t.Errorf("expired by the gate: exit=%d stderr=%q, want 1", code, errs)
	}
	if n := countMsgs(t, f, "fleet.approval.decision.run1."+string(req.CallKey)); n != 0 {
		t.Errorf("%d decisions published for a settled request, want 0", n)
	}
}

func TestCommandList(t *testing.T) {
	f := newFixture(t, GateConfig{})
	code, out, errs := runCommand(t, f, "list")
	if code != 0 || !strings.Contains(out, "no pending approval requests") {
		t.Fatalf("empty list: exit=%d stdout=%q stderr=%q", code, out, errs)
	}

	// Two pending (the second with hostile text), one settled, one expired.
	p1, _ := f.waiting(t, `{"env":"prod"}`, 5*time.Second)
	p2, _ := f.waiting(t, `{"cmd":"\u001b[2Jrm -rf /","note":"a\u202eb","ok":"héllo"}`, 4*time.Second)
	settled, res := f.waiting(t, `{"x":1}`, 5*time.Second)
	f.decide(t, settled, protocol.ApprovalDecision{Digest: settled.Digest, Approved: ptr(true)})
	recv(t, res, 5*time.Second)
	expired, res := f.waiting(t, `{"x":2}`, 100*time.Millisecond)
	recv(t, res, 5*time.Second)

	code, out, errs = runCommand(t, f, "list", "--approver", "alice")
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

	code, out, errs = runCommand(t, f, "list", "--output", "json")
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

func TestCommandConnectFailure(t *testing.T) {
	dial := func(context.Context) (*nats.Conn, error) { return nil, nats.ErrNoServers }
	var out, errb bytes.Buffer
	if code := Command(t.Context(), []string{"list"}, &out, &errb, dial); code != 1 || !strings.Contains(errb.String(), "connecting to NATS") {
		t.Errorf("exit=%d stderr=%q, want 1", code, errb.String())
	}
}
