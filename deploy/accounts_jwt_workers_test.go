package deploy

import (
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/testsync"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// workerAccounts are the accounts of nats-server.conf that hold one
// tool's workers or an edge site, by their user.
var workerAccounts = map[string]string{"DEPLOY": "worker_deploy", "EDGE": "leaf"}

// confImport is one import of an account of nats-server.conf, as the
// server started from it reports it (accountz).
type confImport struct {
	Subject string `json:"subject"`
	Account string `json:"account"`
	Type    int    `json:"type"` // jwt.ExportType: 1 a stream, 2 a service
}

// confExport is one export, as the server reports it.
type confExport struct {
	Subject      string `json:"subject"`
	Type         int    `json:"type"`
	ResponseType string `json:"response_type"`
}

// exportService is jwt.ExportType's service.
const exportService = 2

// confAccountsReport returns, for each account named, its imports, and
// the exports of every account those import from, as a server started
// from nats-server.conf reports them (accountz).
func confAccountsReport(t *testing.T, names ...string) (imports map[string][]confImport, exports map[string]map[string]confExport) {
	t.Helper()
	s := startFromConf(t)
	imports, exports = map[string][]confImport{}, map[string]map[string]confExport{}
	for _, name := range append([]string{"FLEET"}, names...) {
		z, err := s.Accountz(&server.AccountzOptions{Account: name})
		if err != nil || z.Account == nil {
			t.Fatalf("account %s: %v", name, err)
		}
		exports[name] = map[string]confExport{}
		for _, e := range z.Account.Exports {
			var x confExport
			if b, err := json.Marshal(e); err != nil || json.Unmarshal(b, &x) != nil {
				t.Fatalf("account %s: export %v", name, e)
			}
			exports[name][x.Subject] = x
		}
		for _, i := range z.Account.Imports {
			var x confImport
			if b, err := json.Marshal(i); err != nil || json.Unmarshal(b, &x) != nil {
				t.Fatalf("account %s: import %v", name, i)
			}
			// the server's own imports from its system account aside
			if x.Account == "FLEET" || workerAccounts[x.Account] != "" {
				imports[name] = append(imports[name], x)
			}
		}
	}
	return imports, exports
}

// addWorkerAccounts adds to the nsc store of run the accounts DEPLOY and
// EDGE of nats-server.conf, as docs/security.md shows: each of their
// imports from FLEET a private export of FLEET activated for that account
// only, FLEET's imports of their discovery answers private exports of
// theirs activated for FLEET, and their users with the conf's
// permissions. It returns each user's creds file.
func addWorkerAccounts(t *testing.T, run func(args ...string) string, dir string) map[string]string {
	t.Helper()
	opts, err := processConfWithPasswords("nats-server.conf")
	if err != nil {
		t.Fatal(err)
	}
	perms := map[string]*server.Permissions{}
	for _, u := range opts.Users {
		perms[u.Username] = u.Permissions
	}
	names := slices.Sorted(func(yield func(string) bool) {
		for name := range workerAccounts {
			if !yield(name) {
				return
			}
		}
	})
	imports, exports := confAccountsReport(t, names...)
	key := func(account string) string {
		return strings.Trim(strings.TrimSpace(run("describe", "account", account, "--field", "sub")), `"`)
	}
	exported := map[string]bool{}
	export := func(from, subject string) {
		if exported[from+" "+subject] {
			return
		}
		exported[from+" "+subject] = true
		e, ok := exports[from][subject]
		if !ok {
			t.Fatalf("nats-server.conf: %s imports %s, which it does not export", from, subject)
		}
		args := []string{"add", "export", "--account", from, "--private", "--subject", subject}
		if e.Type == exportService {
			args = append(args, "--service")
			// the server reports "Streamed", nsc takes "Stream"
			if rt := strings.TrimSuffix(e.ResponseType, "ed"); rt != "" {
				args = append(args, "--response-type", rt)
			}
		}
		run(args...)
	}
	activate := func(from, to string, i confImport) {
		export(from, i.Subject)
		token := filepath.Join(dir, fmt.Sprintf("activation-%s-%s-%d.jwt", from, to, len(exported)))
		run("generate", "activation", "--account", from, "--subject", i.Subject, "--target-account", key(to), "--output-file", token)
		run("add", "import", "--account", to, "--token", token, "--local-subject", i.Subject)
	}
	for _, name := range names {
		run("add", "account", name)
	}
	creds := map[string]string{}
	for _, name := range names {
		for _, i := range imports[name] {
			activate(i.Account, name, i)
		}
		user := workerAccounts[name]
		p := perms[user]
		args := []string{"add", "user", "--account", name, "--name", user,
			"--allow-pub", strings.Join(p.Publish.Allow, ","), "--allow-sub", strings.Join(p.Subscribe.Allow, ",")}
		if p.Response != nil {
			args = append(args, fmt.Sprintf("--allow-pub-response=%d", p.Response.MaxMsgs), "--response-ttl", p.Response.Expires.String())
		}
		run(args...)
		creds[user] = filepath.Join(dir, user+".creds")
		run("generate", "creds", "--account", name, "--name", user, "--output-file", creds[user])
	}
	// nsc refuses two imports of one local subject, which the conf has for
	// the micro services' discovery subjects ($SRV.PING, ...): in JWT
	// mode FLEET imports each from one worker account only.
	discovery := map[string]bool{}
	for _, i := range imports["FLEET"] {
		if !discovery[i.Subject] {
			discovery[i.Subject] = true
			activate(i.Account, "FLEET", i)
		}
	}
	return creds
}

// checkWorkerAccounts performs, in JWT mode, what the accounts of one
// tool's workers (worker_deploy) and of an edge site (leaf, through a
// leaf node whose remote holds its creds file) may do, each beside what
// they may not: take their own tool's call and store its own record;
// write a shared record, pull another tool's call. hubLeaf is the hub's
// leaf node listener; admin publishes the calls.
func checkWorkerAccounts(t *testing.T, s *server.Server, hubLeaf string, admin client, creds map[string]string) {
	t.Helper()
	subjects := protocol.Subjects{}
	ctx := t.Context()
	// two of each: a call left for the refused pulls to take
	for _, subj := range []string{"fleet.call.deploy.interactive.client", "fleet.call.deploy.interactive.client",
		"fleet.call.calculator.interactive.client", "fleet.call.calculator.interactive.client"} {
		if _, err := admin.js.Publish(ctx, subj, []byte(`{"arguments":"secret"}`)); err != nil {
			t.Fatalf("publishing %s: %v", subj, err)
		}
	}
	// pullOne takes one call from durable as c, and reports whether it got one.
	pullOne := func(c client, durable string) bool {
		cons, err := c.js.Consumer(ctx, subjects.CallsStream(), durable)
		if err != nil {
			return false
		}
		batch, err := cons.Fetch(1, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return false
		}
		got := false
		for m := range batch.Messages() {
			got = m.Ack() == nil
		}
		return got
	}
	// stores reports whether c's record on subject is stored.
	stores := func(c client, subject string) bool {
		_, err := c.js.Publish(ctx, subject, []byte(`{"v":1,"worker":"x","nonce":"n"}`))
		return err == nil
	}

	nc, err := connectJWT(s.ClientURL(), nats.UserCredentials(creds["worker_deploy"]), nats.CustomInboxPrefix(inboxOf("worker_deploy")),
		nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	if err != nil {
		t.Fatalf("worker_deploy: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc, jetstream.WithDefaultTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	deployer := client{nc, js}
	if !pullOne(deployer, "tool_deploy") {
		t.Error("JWT mode: worker_deploy did not take deploy's call")
	}
	if !stores(deployer, "fleet.own.deploy.start.r1.k1") {
		t.Error("JWT mode: worker_deploy's own start record was not stored")
	}
	if stores(deployer, "fleet.start.deploy.r1.k1") {
		t.Error("JWT mode: worker_deploy stored a record in the shared FLEET_STARTS")
	}
	if pullOne(deployer, "tool_calculator") {
		t.Error("JWT mode: worker_deploy took a call of calculator")
	}

	// The edge site: a leaf node whose remote carries the leaf user's
	// creds file, and a worker of the site connected to it.
	u, err := url.Parse("nats-leaf://" + hubLeaf)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoSigs: true, NoLog: true,
		LeafNode: server.LeafNodeOpts{Remotes: []*server.RemoteLeafOpts{{URLs: []*url.URL{u}, Credentials: creds["leaf"]}}}})
	if err != nil {
		t.Fatal(err)
	}
	leaf.Start()
	t.Cleanup(func() { leaf.Shutdown(); leaf.WaitForShutdown() })
	if !leaf.ReadyForConnections(10 * time.Second) {
		t.Fatal("leaf node not ready")
	}
	testsync.WaitUntil(t, 30*time.Second, "the leaf node joins the hub", func() bool { return leaf.NumLeafNodes() == 1 })
	enc, err := connectJWT(leaf.ClientURL(), nats.CustomInboxPrefix(inboxOf("leaf")), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(enc.Close)
	ejs, err := jetstream.NewWithDomain(enc, "hub", jetstream.WithDefaultTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	edge := client{enc, ejs}
	testsync.WaitUntil(t, 30*time.Second, "the edge takes calculator's call", func() bool { return pullOne(edge, "tool_calculator") })
	if !stores(edge, "fleet.own.calculator.claim.r1.k1") {
		t.Error("JWT mode: the edge's own execution record was not stored")
	}
	if stores(edge, "fleet.claim.calculator.r1.k1") {
		t.Error("JWT mode: the edge stored a record in the shared FLEET_CLAIMS")
	}
	if pullOne(edge, "tool_deploy") {
		t.Error("JWT mode: the edge took a call of deploy")
	}
	for stream, want := range map[string]uint64{
		subjects.ClaimsStream(): 0, subjects.StartsStream(): 0,
		subjects.OwnClaimsStream("calculator"): 1, subjects.OwnStartsStream("deploy"): 1,
	} {
		if n := msgsIn(t, admin, stream); n != want {
			t.Errorf("JWT mode: %s holds %d records, want %d", stream, n, want)
		}
	}
}

// freeLoopback returns a loopback address whose port was free a moment
// ago.
func freeLoopback(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
