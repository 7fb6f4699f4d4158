package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/natscli"
	"github.com/toolfleet/toolfleet/internal/natstest"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// tenantsConf is two tenants on one server, each a NATS account with
// JetStream of its own: their subjects, streams and inboxes are apart.
const tenantsConf = `
accounts {
  TENANT_A: { jetstream: enabled, users: [ { user: "alice", password: "alice-pw" } ] }
  TENANT_B: { jetstream: enabled, users: [ { user: "bob", password: "bob-pw" } ] }
}
`

// TestTenantsAreNATSAccounts: two tenants run fleets with the same prefix
// and the same tool names on one server, each in its own account. A run
// of tenant A is served by A's worker only; B's worker, which serves the
// same tools and stands ready, runs nothing, and a connection of B
// subscribed to every subject sees none of A's calls, results or
// arguments.
func TestTenantsAreNATSAccounts(t *testing.T) {
	t.Parallel()
	srv := natstest.StartWithConfig(t, tenantsConf)
	url := func(user, pw string) string {
		return strings.Replace(srv.ClientURL(), "nats://", "nats://"+user+":"+pw+"@", 1)
	}
	a := newFleetAt(t, url("alice", "alice-pw"))
	b := newFleetAt(t, url("bob", "bob-pw"))

	var mu sync.Mutex
	var seenByB []string
	sniff, err := nats.Connect(url("bob", "bob-pw"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sniff.Close)
	if _, err := sniff.Subscribe(">", func(m *nats.Msg) {
		mu.Lock()
		seenByB = append(seenByB, m.Subject+" "+string(m.Data))
		mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}

	wa := startProc(t, "worker-a", bins.toolworker, "--nats-url", a.url(), "--tools", a.manifest, "--name", "wa", "--log-level", "debug")
	wa.waitLog(30*time.Second, "worker started")
	wb := startProc(t, "worker-b", bins.toolworker, "--nats-url", b.url(), "--tools", b.manifest, "--name", "wb", "--log-level", "debug")
	wb.waitLog(30*time.Second, "worker started")

	coord := a.coordinator("coordinator-a", script{
		turn(call("p", toolCharge, map[string]any{"id": "tenant-a-payment"}), call("w", toolWork, map[string]any{"id": "tenant-a-work"})),
		final("done"),
	}, "--tool-timeout", "30s")
	res := coord.result(time.Minute, 0)
	recs, _ := answered(t, res)
	for _, id := range []string{"p", "w"} {
		if recs[id].Outcome != protocol.OutcomeOK || recs[id].Worker != "wa" {
			t.Errorf("call %s = %+v, want ok from tenant A's worker", id, recs[id])
		}
	}
	if runs := a.runsOf("tenant-a-payment"); len(runs) != 1 || runs[0].ppid != wa.pid() {
		t.Errorf("tenant A's charge ran %+v, want once on A's worker", runs)
	}
	if runs := b.runs(); len(runs) != 0 {
		t.Errorf("tenant B's worker ran %+v, want nothing", runs)
	}
	if err := sniff.Flush(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, m := range seenByB {
		if strings.Contains(m, "tenant-a") || strings.Contains(m, string(res.RunID)) {
			t.Errorf("tenant B saw tenant A's traffic: %.200s", m)
		}
	}
	if len(seenByB) == 0 {
		t.Fatal(fmt.Errorf("tenant B's sniffer saw nothing at all, not even its own worker: the check proves nothing"))
	}
}

// bobPassword is the password of the client account "bob" of
// startServerWithBob.
const bobPassword = "tf-e2e-bob-9"

// startServerWithBob starts nats-server from deploy/nats-server.conf with a
// second client account, bob, added as the conf says (its client account
// block copied, bob's name in place of "client"), and provisions it.
func startServerWithBob(t *testing.T) *server.Server {
	t.Helper()
	data, err := os.ReadFile("../deploy/nats-server.conf")
	if err != nil {
		t.Fatal(err)
	}
	conf := string(data)
	start := strings.Index(conf, "\n  client {\n")
	end := strings.Index(conf[start+1:], "\n  }\n")
	if start < 0 || end < 0 {
		t.Fatal("deploy/nats-server.conf: no client account block")
	}
	block := conf[start : start+1+end+len("\n  }\n")]
	bob := strings.NewReplacer("_INBOX_client", "_INBOX_bob", "TOOLFLEET_CLIENT_PASSWORD", "TOOLFLEET_BOB_PASSWORD").Replace(block)
	bob = regexp.MustCompile(`\bclient\b`).ReplaceAllString(bob, "bob")
	path := filepath.Join(t.TempDir(), "nats-server.conf")
	if err := os.WriteFile(path, []byte(conf[:start]+block+bob[1:]+conf[start+len(block):]), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := func() (*server.Options, error) {
		// the passwords of deployServerOptions, and bob's
		deployConfigMu.Lock()
		defer deployConfigMu.Unlock()
		env := map[string]string{"TOOLFLEET_BOB_PASSWORD": bobPassword,
			"TOOLFLEET_WORKER_DEPLOY_PASSWORD": "tf-worker-deploy-unused", "TOOLFLEET_LEAF_PASSWORD": "tf-leaf-unused"}
		for _, role := range []string{"admin", "coordinator", "worker", "operator", "client", "viewer"} {
			env["TOOLFLEET_"+strings.ToUpper(role)+"_PASSWORD"] = approvalPasswords[role]
		}
		for k, v := range env {
			os.Setenv(k, v)
			defer os.Unsetenv(k)
		}
		return server.ProcessConfigFile(path)
	}()
	if err != nil {
		t.Fatalf("the conf with bob: %v", err)
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

// TestSecondClientCannotTouchTheFirstsRun: two client accounts of the
// shipped configuration, client and bob, one fleet of real processes
// (coordinator serve, toolworker). bob learns the run id of client's
// submission "order-1234" and, before client submits, re-publishes its own
// stored submission 2,000 times with the reply subjects client's cancel
// subject and client's result key (issue 34, attacks 3 and 4, from another
// client account); then tries to cancel the run with "coordinator runs
// cancel" and to read its result. client's "coordinator submit --wait"
// gets its own answer, naturally finished; nothing is stored on either
// subject; bob's cancel and read are refused.
func TestSecondClientCannotTouchTheFirstsRun(t *testing.T) {
	t.Parallel()
	srv := startServerWithBob(t)
	url := srv.ClientURL()
	wAddr, cAddr := freeAddr(t), freeAddr(t)
	startProcEnv(t, "toolworker", approvalEnv(t, url, "worker"), bins.toolworker,
		"--builtin", "calculator,echo", "--name", "w1", "--metrics-addr", wAddr)
	startProcEnv(t, "coordinator", approvalEnv(t, url, "coordinator"), bins.coordinator,
		"serve", "--nats-url", url, "--name", "c1", "--metrics-addr", cAddr)
	for _, addr := range []string{wAddr, cAddr} {
		natstest.WaitFor(t, 60*time.Second, func() error {
			_, err := httpGet("http://" + addr + "/readyz")
			return err
		})
	}

	run := protocol.SubmissionRunID("client", "order-1234")
	cancelSubject := "fleet.journal.cancel." + string(run)
	resultKey := protocol.RunKey("client", run)
	bob, err := nats.Connect(url, nats.UserInfo("bob", bobPassword), nats.CustomInboxPrefix("_INBOX_bob"),
		nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	if err != nil {
		t.Fatal(err)
	}
	defer bob.Close()
	for i, target := range []string{cancelSubject, "$KV.fleet_runs." + resultKey} {
		id := fmt.Sprintf("b-%d", i)
		msg := nats.NewMsg("fleet.run.submit.bob.default." + id)
		msg.Data = []byte(`{"prompt":"hi"}`)
		msg.Header.Set(protocol.HeaderMsgID, protocol.SubmissionMsgID("bob", id))
		msg.Header.Set(protocol.HeaderAgent, protocol.DefaultAgent)
		msg.Reply = target
		for range 2000 {
			if err := bob.PublishMsg(msg); err != nil {
				t.Fatal(err)
			}
		}
		msg.Reply = ""
		if r, err := bob.RequestMsg(msg, 10*time.Second); err != nil || !strings.Contains(string(r.Data), `"duplicate"`) {
			t.Fatalf("bob's own submission %s, asked on its inbox: %v %v; want a duplicate's acknowledgement", id, r, err)
		}
	}

	code, out := runSubmit(t, url, "--wait", "--wait-timeout", "60s", "--id", "order-1234",
		"What is (17 + 25) * 3, what is 2 ** 10, and what is their sum?")
	if code != 0 || !strings.Contains(out, "1150") {
		t.Fatalf("client's run after bob's attack: exit %d\n%s", code, out)
	}

	// bob asks the fleet to cancel client's run, and reads its result.
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bins.coordinator, "runs", "cancel", string(run), "--by", "bob")
	cmd.Env = append(natscli.Env(t), "NATS_URL="+url, "NATS_USER=bob", "NATS_PASSWORD="+bobPassword)
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "ermission") {
		t.Errorf("bob's coordinator runs cancel of client's run: %v, want NATS's refusal\n%s", err, out)
	} else {
		t.Logf("bob's runs cancel: %v\n%s", err, out)
	}
	if _, err := bob.Request("$JS.API.DIRECT.GET.KV_fleet_runs.$KV.fleet_runs."+resultKey, nil, 2*time.Second); err == nil {
		t.Error("bob's direct get of client's result was answered")
	}

	_, ajs := approvalConn(t, url, "admin")
	cancels, err := ajs.Stream(ctx, "FLEET_CANCELS")
	if err != nil {
		t.Fatal(err)
	}
	if m, err := cancels.GetLastMsgForSubject(ctx, cancelSubject); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Errorf("FLEET_CANCELS on %s: %v %v; want nothing stored", cancelSubject, m, err)
	}
	kv, err := ajs.KeyValue(ctx, "fleet_runs")
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, resultKey)
	if err != nil {
		t.Fatal(err)
	}
	res, err := protocol.DecodeRunResult(e.Value(), 0)
	if err != nil || res.RunID != run || res.TerminationReason != "natural" || !strings.Contains(res.Answer, "1150") {
		t.Errorf("client's stored result: %+v, %v; want its own natural answer", res, err)
	}
	if h, err := kv.History(ctx, resultKey); err != nil || len(h) != 1 {
		t.Errorf("client's result key has %d revisions (%v), want 1: the coordinator's", len(h), err)
	}
}
