package deploy

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natsbus/workerbus"
	"github.com/toolfleet/toolfleet/internal/natscli"
	"github.com/toolfleet/toolfleet/internal/testsync"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// TestJWTAccountsLayout builds the layout of deploy/nats-server.conf in
// decentralised (JWT) mode with nsc, as docs/security.md shows it: an
// operator, the account FLEET with JetStream and the conf's exports
// (private, each activated for the client's own subjects), the account
// client with the conf's imports and its user's permissions, a memory
// resolver. Against a
// real nats-server started from the generated configuration, the client
// (its creds file, the nats CLI) submits a run, and performs attack 1 of
// issue 34: nothing reaches the audit log. The accounts DEPLOY and EDGE
// are built from the conf's own imports, exports and permissions
// (addWorkerAccounts), with the hub's JetStream domain and a leaf node
// whose remote holds the leaf user's creds file: each takes its own
// tool's call and stores its own records, and neither a shared record
// nor another tool's call (checkWorkerAccounts). Then the client's user
// is revoked: it can no longer connect, while the fleet's users still
// can.
func TestJWTAccountsLayout(t *testing.T) {
	nsc, err := exec.LookPath("nsc")
	if err != nil {
		t.Skip("nsc is not installed (README.md says how to build v2.11.0): the JWT layout of docs/security.md is not checked")
	}
	dir := t.TempDir()
	run := func(args ...string) string {
		t.Helper()
		c := exec.Command(nsc, append([]string{"--all-dirs", filepath.Join(dir, "nsc")}, args...)...)
		c.Env = append(natscli.Env(t), "NKEYS_PATH="+filepath.Join(dir, "nsc", "keys"))
		out, err := c.CombinedOutput()
		if err != nil {
			t.Fatalf("nsc %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	run("add", "operator", "--generate-signing-key", "--sys", "--name", "toolfleet")
	run("add", "account", "FLEET")
	run("edit", "account", "FLEET", "--js-mem-storage", "-1", "--js-disk-storage", "-1", "--js-streams", "-1", "--js-consumer", "-1")
	// JWT accounts are named by their public keys, not by names: a
	// token position cannot bind a subject to "client". Each export is
	// private instead, and FLEET signs the client account an activation
	// for its own subjects only.
	exports := []struct {
		subject, client string
		service         bool
	}{
		{"fleet.run.submit.*.>", "fleet.run.submit.client.>", true},
		{"$JS.API.DIRECT.GET.KV_fleet_runs.$KV.fleet_runs.*.>", "$JS.API.DIRECT.GET.KV_fleet_runs.$KV.fleet_runs.client.>", true},
		{"fleet.run.result.*.>", "fleet.run.result.client.>", false},
		{"fleet.run.progress.*.>", "fleet.run.progress.client.>", false},
		{"fleet.run.input.*.>", "fleet.run.input.client.>", true},
	}
	run("add", "account", "client")
	clientKey := strings.Trim(strings.TrimSpace(run("describe", "account", "client", "--field", "sub")), `"`)
	for i, e := range exports {
		args := []string{"add", "export", "--account", "FLEET", "--private", "--subject", e.subject}
		if e.service {
			args = append(args, "--service")
		}
		run(args...)
		token := filepath.Join(dir, fmt.Sprintf("activation-%d.jwt", i))
		run("generate", "activation", "--account", "FLEET", "--subject", e.client, "--target-account", clientKey, "--output-file", token)
		run("add", "import", "--account", "client", "--token", token, "--local-subject", e.client)
	}
	// admin provisions (this test's fleet has no other user); the client
	// has the conf's permissions.
	run("add", "user", "--account", "FLEET", "--name", "admin")
	run("add", "user", "--account", "client", "--name", "client",
		"--allow-pub", "fleet.run.submit.client.>,$JS.API.DIRECT.GET.KV_fleet_runs.$KV.fleet_runs.client.>,fleet.run.input.client.>",
		"--allow-sub", "fleet.run.result.client.>,fleet.run.progress.client.>,_INBOX_client.>")
	// One tool's workers (DEPLOY) and an edge site (EDGE), as the conf
	// has them.
	creds := addWorkerAccounts(t, run, dir)
	for acc, user := range map[string]string{"FLEET": "admin", "client": "client"} {
		creds[user] = filepath.Join(dir, user+".creds")
		run("generate", "creds", "--account", acc, "--name", user, "--output-file", creds[user])
	}

	store, hubLeaf := t.TempDir(), freeLoopback(t)
	start := func() *server.Server {
		t.Helper()
		conf := filepath.Join(dir, "server.conf")
		run("generate", "config", "--mem-resolver", "--sys-account", "SYS", "--config-file", conf, "--force")
		b, err := os.ReadFile(conf)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(conf, append(b, []byte("\njetstream { store_dir: \""+store+"\", domain: hub }\nleafnodes { listen: \""+hubLeaf+"\" }\n")...), 0o600); err != nil {
			t.Fatal(err)
		}
		opts, err := server.ProcessConfigFile(conf)
		if err != nil {
			t.Fatalf("the generated configuration: %v", err)
		}
		opts.Host, opts.Port, opts.NoSigs, opts.NoLog = "127.0.0.1", server.RANDOM_PORT, true, true
		s, err := server.NewServer(opts)
		if err != nil {
			t.Fatal(err)
		}
		s.Start()
		if !s.ReadyForConnections(10 * time.Second) {
			t.Fatal("nats-server not ready")
		}
		return s
	}
	connect := func(s *server.Server, user string) (client, error) {
		nc, err := connectJWT(s.ClientURL(), nats.UserCredentials(creds[user]), nats.CustomInboxPrefix(inboxOf(user)),
			nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
		if err != nil {
			return client{}, err
		}
		t.Cleanup(nc.Close)
		js, err := jetstream.New(nc, jetstream.WithDefaultTimeout(5*time.Second))
		return client{nc, js}, err
	}
	s := start()
	admin, err := connect(s, "admin")
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	// The account's JetStream answers once the server has loaded it from
	// the resolver: a request before that finds no responder.
	testsync.WaitFor(t, time.Minute, func() error {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err := admin.js.AccountInfo(actx)
		return err
	})
	// coordinator provision --tool-consumer deploy,calculator,echo
	tools := []string{"deploy", "calculator", "echo"}
	if _, err := natsbus.Provision(ctx, admin.js, protocol.Subjects{}, natsbus.StreamConfig{OwnRecordTools: tools}); err != nil {
		t.Fatalf("admin provisioning: %v", err)
	}
	if _, err := workerbus.ProvisionToolConsumers(ctx, admin.js, protocol.Subjects{}, tools); err != nil {
		t.Fatalf("admin provisioning the tools' consumers: %v", err)
	}

	// The client's submission with the nats CLI and its creds file.
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cli := exec.CommandContext(cctx, natscli.Path(t), "--server", s.ClientURL(), "--creds", creds["client"], "--inbox-prefix", "_INBOX_client",
		"req", "fleet.run.submit.client.default.jwt-1", `{"prompt":"hi"}`)
	cli.Env = natscli.Env(t)
	if out, err := cli.CombinedOutput(); err != nil || !strings.Contains(string(out), `"stream":"FLEET_RUNS"`) {
		t.Fatalf("nats req as the client: %v\n%s", err, out)
	}
	// Attack 1, through the import.
	c, err := connect(s, "client")
	if err != nil {
		t.Fatal(err)
	}
	reflect(t, c, "client", "jwt-2", "fleet.approval.decision.r1.k1")
	if got := storedOn(t, admin, "FLEET_APPROVALS", "fleet.approval.decision.r1.k1"); got != "" {
		t.Errorf("attack 1 in JWT mode: FLEET_APPROVALS stored %s", got)
	}

	checkWorkerAccounts(t, s, hubLeaf, admin, creds)

	// Revoking the client's user: it can no longer connect.
	run("revocations", "add-user", "--account", "client", "--name", "client")
	s.Shutdown()
	s.WaitForShutdown()
	s = start()
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	if _, err := connect(s, "client"); err == nil {
		t.Error("the revoked client connected")
	}
	if _, err := connect(s, "admin"); err != nil {
		t.Errorf("admin after the client's revocation: %v", err)
	}
}

// connectJWT connects to url with opts. On a loaded machine the JWT
// handshake (the user's signature checked against its account) can
// outlast nats.go's default 2s bound, or the server's first PING can come
// before its PONG, which nats.go refuses: the bound is generous, and a
// handshake that failed for anything but the server's refusal is tried
// again, three times at most.
func connectJWT(url string, opts ...nats.Option) (*nats.Conn, error) {
	opts = append(opts, nats.Timeout(30*time.Second))
	var nc *nats.Conn
	var err error
	for attempt := 1; attempt <= 3; attempt++ {
		nc, err = nats.Connect(url, opts...)
		if err == nil || errors.Is(err, nats.ErrAuthorization) || strings.Contains(strings.ToLower(err.Error()), "authorization") {
			break
		}
	}
	return nc, err
}
