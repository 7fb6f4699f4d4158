package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/natscli"
	"github.com/toolfleet/toolfleet/internal/natstest"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// The users of deploy/nats-server.conf and the passwords this test gives them.
var approvalPasswords = map[string]string{
	"admin":       "tf-e2e-admin-0",
	"coordinator": "tf-e2e-coordinator-1",
	"worker":      "tf-e2e-worker-2",
	"operator":    "tf-e2e-operator-3",
	"client":      "tf-e2e-client-4",
	"viewer":      "tf-e2e-viewer-5",
}

// TestApprovalEndToEnd runs the real binaries against a server started from
// deploy/nats-server.conf: a toolworker (worker user) serving exec tools that
// record their side effects, a coordinator (coordinator user) whose scripted
// model makes calls needing approval, and an operator (operator user)
// answering with the real nats CLI.
func TestApprovalEndToEnd(t *testing.T) {
	t.Parallel()
	natsBin := natscli.Path(t)
	srv := startApprovalServer(t)
	url := srv.ClientURL()
	dir := t.TempDir()
	out := filepath.Join(dir, "effects")
	if err := os.Mkdir(out, 0o755); err != nil {
		t.Fatal(err)
	}

	manifest := writeJSON(t, dir, "tools.json", map[string]any{"tools": []any{
		approvalEffectTool("deploy_a", out, true),  // declares requires_approval
		approvalEffectTool("deploy_b", out, false), // needs it through --require-approval
	}})
	worker := startProcEnv(t, "toolworker", approvalEnv(t, url, "worker"), bins.toolworker,
		"--tools", manifest, "--name", "w1")
	waitForApprovalCatalog(t, url, worker, "deploy_a", "deploy_b")

	t.Run("operator approves one call and denies the other", func(t *testing.T) {
		model := writeJSON(t, dir, "two-calls.json", map[string]any{"turns": script{
			turn(call("c1", "deploy_a", map[string]any{"target": "alpha"}), call("c2", "deploy_b", map[string]any{"target": "beta"})),
			final("done"),
		}})
		watch := watchApprovalRequests(t, natsBin, srv, 2)
		coord := startProcEnv(t, "coordinator", approvalEnv(t, url, "coordinator"), bins.coordinator,
			"run", "--workers", "0", "--model", "scripted:"+model, "--require-approval", "deploy_b",
			"--approval-timeout", "30s", "--output", "json", "deploy both")

		requests := watch.requests(t, 30*time.Second)
		for _, req := range requests {
			body := fmt.Sprintf(`{"digest":%q,"approved":true,"approver":"e2e-operator"}`, req.Digest)
			if req.Tool == "deploy_b" {
				body = fmt.Sprintf(`{"digest":%q,"approved":false,"reason":"beta is frozen","approver":"e2e-operator"}`, req.Digest)
			}
			approvalNatsPub(t, natsBin, url, "operator", req.DecisionSubject, body)
		}

		res := coord.result(60*time.Second, 0)
		if res.TerminationReason != "natural" {
			t.Errorf("termination_reason=%q, want natural", res.TerminationReason)
		}
		if got := approvalOutcomes(res); got["c1"] != "ok" || got["c2"] != "denied" || len(got) != 2 {
			t.Errorf("approvalOutcomes=%v, want c1 ok and c2 denied", got)
		}
		if b, err := os.ReadFile(filepath.Join(out, "deploy_a")); err != nil || !strings.Contains(string(b), `"alpha"`) {
			t.Errorf("approved call did not run: %q, %v", b, err)
		}
		if _, err := os.Stat(filepath.Join(out, "deploy_b")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("denied call ran (stat: %v)", err)
		}
		if msg := approvalToolMessage(res, "c2"); !strings.Contains(msg, "blocked by approval: beta is frozen") {
			t.Errorf("observation for c2 = %q, want the operator's reason", msg)
		}

		// Nothing is left pending, as the operator sees it.
		cmd := exec.CommandContext(t.Context(), bins.coordinator, "approvals", "list")
		cmd.Env = approvalEnv(t, url, "operator")
		b, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(b), "no pending approval requests") {
			t.Errorf("coordinator approvals list as operator: %v\n%s", err, b)
		}
	})

	t.Run("decision with worker credentials is refused", func(t *testing.T) {
		if err := os.Remove(filepath.Join(out, "deploy_a")); err != nil {
			t.Fatal(err)
		}
		model := writeJSON(t, dir, "one-call.json", map[string]any{"turns": script{
			turn(call("c1", "deploy_a", map[string]any{"target": "gamma"})),
			final("done"),
		}})
		watch := watchApprovalRequests(t, natsBin, srv, 1)
		coord := startProcEnv(t, "coordinator", approvalEnv(t, url, "coordinator"), bins.coordinator,
			"run", "--workers", "0", "--model", "scripted:"+model,
			"--approval-timeout", "2s", "--output", "json", "deploy gamma")

		req := watch.requests(t, 30*time.Second)[0]
		body := fmt.Sprintf(`{"digest":%q,"approved":true,"approver":"mallory"}`, req.Digest)
		pub := exec.CommandContext(t.Context(), natsBin, "pub", req.DecisionSubject, body)
		pub.Env = approvalEnv(t, url, "worker")
		pubOut, err := pub.CombinedOutput()
		if err == nil || !strings.Contains(string(pubOut), "Permissions Violation for Publish to") {
			t.Errorf("nats pub of a decision as worker: %v, %s; want a permissions violation", err, pubOut)
		}

		res := coord.result(60*time.Second, 0)
		if res.TerminationReason != "natural" {
			t.Errorf("termination_reason=%q, want natural", res.TerminationReason)
		}
		if got := approvalOutcomes(res); got["c1"] != "approval_expired" {
			t.Errorf("approvalOutcomes=%v, want c1 approval_expired", got)
		}
		if _, err := os.Stat(filepath.Join(out, "deploy_a")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("a call approved with worker credentials ran (stat: %v)", err)
		}
		// The server refused the publish: the audit log has no decision.
		nc, js := approvalConn(t, url, "operator")
		defer nc.Close()
		st, err := js.Stream(t.Context(), protocol.Subjects{}.ApprovalsStream())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.GetLastMsgForSubject(t.Context(), req.DecisionSubject); !errors.Is(err, jetstream.ErrMsgNotFound) {
			t.Errorf("the worker's decision reached the stream (err=%v)", err)
		}
		m, err := st.GetLastMsgForSubject(t.Context(), "fleet.approval.outcome."+string(req.RunID)+"."+string(req.CallKey))
		if err != nil || !strings.Contains(string(m.Data), `"outcome":"expired"`) {
			t.Errorf("outcome note: %v, %v; want expired", m, err)
		}
	})
}

// startApprovalServer starts nats-server from deploy/nats-server.conf in
// this process, on a random loopback port with a temporary store.
func startApprovalServer(t *testing.T) *server.Server {
	t.Helper()
	opts, err := deployServerOptions()
	if err != nil {
		t.Fatalf("deploy/nats-server.conf: %v", err)
	}
	opts.Host, opts.Port, opts.StoreDir = "127.0.0.1", server.RANDOM_PORT, t.TempDir()
	opts.NoSigs, opts.NoLog = true, true
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	provisionAs(t, s.ClientURL(), approvalEnv(t, s.ClientURL(), "admin"))
	return s
}

// deployConfigMu serialises the parsing of deploy/nats-server.conf, which
// reads its passwords from the process environment.
var deployConfigMu sync.Mutex

// deployServerOptions parses deploy/nats-server.conf with this test's
// passwords in the environment, as the deployment exports them. The
// variables are set only while the file is parsed (t.Setenv would keep the
// tests that start this server from running in parallel).
func deployServerOptions() (*server.Options, error) {
	deployConfigMu.Lock()
	defer deployConfigMu.Unlock()
	env := map[string]string{
		"TOOLFLEET_ADMIN_PASSWORD":         approvalPasswords["admin"],
		"TOOLFLEET_WORKER_DEPLOY_PASSWORD": "tf-worker-deploy-unused",
		"TOOLFLEET_LEAF_PASSWORD":          "tf-leaf-unused",
		"TOOLFLEET_COORDINATOR_PASSWORD":   approvalPasswords["coordinator"],
		"TOOLFLEET_WORKER_PASSWORD":        approvalPasswords["worker"],
		"TOOLFLEET_OPERATOR_PASSWORD":      approvalPasswords["operator"],
		"TOOLFLEET_CLIENT_PASSWORD":        approvalPasswords["client"],
		"TOOLFLEET_VIEWER_PASSWORD":        approvalPasswords["viewer"],
	}
	for k, v := range env {
		prev, had := os.LookupEnv(k)
		os.Setenv(k, v)
		defer func() {
			if had {
				os.Setenv(k, prev)
			} else {
				os.Unsetenv(k)
			}
		}()
	}
	return server.ProcessConfigFile("../deploy/nats-server.conf")
}

// provisionAs runs "coordinator provision" with env (the admin user's
// credentials) and fails the test unless it succeeds.
func provisionAs(t *testing.T, url string, env []string) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), bins.coordinator, "provision", "--nats-url", url)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "FLEET_APPROVALS") {
		t.Fatalf("coordinator provision: %v\n%s", err, out)
	}
}

// approvalEnv is a child's environment: no inherited NATS settings, a
// private HOME, and the given user's credentials.
func approvalEnv(t *testing.T, url, user string) []string {
	t.Helper()
	return append(natscli.Env(t), "NATS_URL="+url, "NATS_USER="+user, "NATS_PASSWORD="+approvalPasswords[user])
}

func approvalConn(t *testing.T, url, user string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(url, nats.UserInfo(user, approvalPasswords[user]), nats.CustomInboxPrefix("_INBOX_"+user))
	if err != nil {
		t.Fatalf("connect as %s: %v", user, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// approvalEffectTool is an exec tool that writes its arguments to out/<name>.
func approvalEffectTool(name, out string, requiresApproval bool) map[string]any {
	return map[string]any{
		"name":        name,
		"description": "records that it ran",
		"parameters": map[string]any{
			"type":                 "object",
			"properties":           map[string]any{"target": map[string]any{"type": "string"}},
			"required":             []string{"target"},
			"additionalProperties": false,
		},
		"timeout":           "10s",
		"command":           []string{"/bin/sh", "-c", `cat > "$OUT/` + name + `" && echo ran`},
		"requires_approval": requiresApproval,
		"env":               map[string]string{"OUT": out},
	}
}

func approvalOutcomes(r *loop.Result) map[string]string {
	m := map[string]string{}
	for _, c := range r.Calls {
		m[c.CallID] = string(c.Outcome)
	}
	return m
}

func approvalToolMessage(r *loop.Result, id string) string {
	for _, m := range r.Messages {
		if m.Role == "tool" && m.ToolCallID == id {
			return m.Content
		}
	}
	return ""
}

// waitForApprovalCatalog waits until the worker has published every tool's spec.
func waitForApprovalCatalog(t *testing.T, url string, worker *proc, tools ...string) {
	t.Helper()
	nc, js := approvalConn(t, url, "coordinator")
	defer nc.Close()
	natstest.WaitFor(t, 30*time.Second, func() error {
		if worker.exited() {
			t.Fatalf("toolworker exited: %v\n%s", worker.err, worker.log())
		}
		kv, err := js.KeyValue(t.Context(), protocol.Subjects{}.CatalogBucket())
		if err != nil {
			return err
		}
		for _, tool := range tools {
			if _, err := kv.Get(t.Context(), tool); err != nil {
				return fmt.Errorf("%s: %w", tool, err)
			}
		}
		return nil
	})
}

// approvalWatch is "nats sub 'fleet.approval.request.>' --count N --raw" run
// as the operator user.
type approvalWatch struct {
	p *proc
	n int
}

func watchApprovalRequests(t *testing.T, natsBin string, srv *server.Server, n int) *approvalWatch {
	t.Helper()
	p := startProcEnv(t, "nats sub", approvalEnv(t, srv.ClientURL(), "operator"), natsBin,
		"sub", "fleet.approval.request.>", "--count", fmt.Sprint(n), "--raw")
	natstest.WaitFor(t, 30*time.Second, func() error {
		if p.exited() {
			t.Fatalf("nats sub did not subscribe: %v\n%s", p.err, p.log())
		}
		cz, err := srv.Connz(&server.ConnzOptions{Subscriptions: true})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(cz.Conns, func(c *server.ConnInfo) bool { return slices.Contains(c.Subs, "fleet.approval.request.>") }) {
			return errors.New("nats sub has not subscribed to fleet.approval.request.>")
		}
		return nil
	})
	return &approvalWatch{p: p, n: n}
}

// requests waits for nats sub to print its N requests and exit.
func (w *approvalWatch) requests(t *testing.T, timeout time.Duration) []protocol.ApprovalRequest {
	t.Helper()
	select {
	case <-w.p.done:
	case <-time.After(timeout):
		t.Fatalf("nats sub saw fewer than %d requests within %v: %q", w.n, timeout, w.p.stdout.String())
	}
	if w.p.err != nil {
		t.Fatalf("nats sub: %v\n%s", w.p.err, w.p.log())
	}
	var reqs []protocol.ApprovalRequest
	sc := bufio.NewScanner(strings.NewReader(w.p.stdout.String()))
	sc.Buffer(nil, protocol.DefaultMaxMessageBytes)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		req, err := protocol.DecodeApprovalRequest(line, 0)
		if err != nil {
			t.Fatalf("nats sub printed %q: %v", line, err)
		}
		reqs = append(reqs, req)
	}
	if len(reqs) != w.n {
		t.Fatalf("nats sub printed %d requests, want %d", len(reqs), w.n)
	}
	return reqs
}

// approvalNatsPub runs "nats pub SUBJECT BODY" as user.
func approvalNatsPub(t *testing.T, natsBin, url, user, subject, body string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, natsBin, "pub", subject, body)
	cmd.Env = approvalEnv(t, url, user)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nats pub %s: %v\n%s", subject, err, out)
	}
}
