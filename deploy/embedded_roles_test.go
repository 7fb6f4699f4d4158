package deploy_test

import (
	"encoding/json"
	"maps"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/toolfleet/toolfleet/internal/embedded"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// embeddedDifferences are the intended differences between a role of
// deploy/nats-server.conf and the same role on a fleet's listening
// embedded server (embedded.FleetAccounts), by user: what the embedded role
// adds to and removes from each list of the conf's.
var embeddedDifferences = map[string]struct {
	pubAllowAdd, pubDenyDrop, pubDenyAdd, subDenyDrop []string
}{
	// The embedded server has no admin: its own coordinator provisions the
	// streams and buckets, so it may create and update them. It still may
	// neither delete nor purge one, nor remove an audit record or an
	// execution record.
	// Its in-process workers share its connection, so it writes an
	// approved call's execution record (FLEET_CLAIMS), as a worker does.
	embedded.RoleCoordinator: {
		pubAllowAdd: []string{"fleet.claim.>"},
		pubDenyDrop: []string{"$JS.API.STREAM.CREATE.>", "$JS.API.STREAM.UPDATE.>",
			// the own record streams of deploy and of the edge site's
			// tools, which the embedded server lacks
			"$JS.API.STREAM.MSG.DELETE.FLEET_CLAIMS_deploy", "$JS.API.STREAM.MSG.DELETE.FLEET_STARTS_deploy",
			"$JS.API.STREAM.MSG.DELETE.FLEET_CLAIMS_calculator", "$JS.API.STREAM.MSG.DELETE.FLEET_STARTS_calculator",
			"$JS.API.STREAM.MSG.DELETE.FLEET_CLAIMS_echo", "$JS.API.STREAM.MSG.DELETE.FLEET_STARTS_echo"},
	},
	// "deploy" is the conf's example of a tool with workers of its own
	// (user worker_deploy, absent from the embedded server): the generic
	// worker is not denied it there.
	embedded.RoleWorker: {
		pubDenyDrop: []string{
			"fleet.result.*.deploy",
			"fleet.claim.deploy.>",
			"fleet.start.deploy.>",
			"$KV.fleet_tools.deploy",
			"$JS.API.CONSUMER.CREATE.FLEET_CALLS.*.fleet.call.deploy.>",
			"$JS.API.CONSUMER.CREATE.FLEET_CALLS.tool_deploy.>",
			"$JS.API.CONSUMER.CREATE.FLEET_CALLS.batch_deploy.>",
			"$JS.API.CONSUMER.INFO.FLEET_CALLS.tool_deploy",
			"$JS.API.CONSUMER.INFO.FLEET_CALLS.batch_deploy",
			"$JS.API.CONSUMER.MSG.NEXT.FLEET_CALLS.tool_deploy",
			"$JS.API.CONSUMER.MSG.NEXT.FLEET_CALLS.batch_deploy",
			"$JS.ACK.FLEET_CALLS.tool_deploy.>",
			"$JS.ACK.FLEET_CALLS.batch_deploy.>",
			"$KV.fleet_limits.bucket.deploy",
		},
		subDenyDrop: []string{"fleet.tool.deploy"},
	},
}

// Users of the conf that the embedded server does not have: admin (its
// coordinator provisions), the example tool's own workers and the edge
// site's leaf node.
var notEmbedded = []string{"admin", "worker_deploy", "leaf"}

// Accounts of the conf that the embedded server does not have: those of
// the example tool's own workers and of the edge sites. What the fleet's
// account exports to them (they are left out of an export's approved
// accounts) or imports from them is left out of the comparison.
var notEmbeddedAccounts = []string{"DEPLOY", "EDGE"}

// TestEmbeddedRolesMatchConf: every role of a listening embedded server
// (embedded.FleetAccounts, default prefix), the one of "coordinator serve"
// (with an operator password) and the one of pkg/fleettest (every password
// drawn, embedded.DrawPasswords), is in the same account and has exactly
// the permissions of the same user in deploy/nats-server.conf, but for the
// differences named in embeddedDifferences; and each account of the
// embedded server exports and imports exactly what the conf's does, as
// both servers report it once started. A change to either that the other
// lacks fails here.
func TestEmbeddedRolesMatchConf(t *testing.T) {
	for _, c := range []struct {
		name     string
		password func(role string) string
	}{
		{"coordinator serve", func(role string) string { return "pw-" + role }},
		{"fleettest", embedded.DrawPasswords},
	} {
		t.Run(c.name, func(t *testing.T) { embeddedRolesMatchConf(t, c.password) })
	}
}

// embeddedRolesMatchConf is TestEmbeddedRolesMatchConf for the accounts
// embedded.FleetAccounts gives with password.
func embeddedRolesMatchConf(t *testing.T, password func(role string) string) {
	_, opts := confUsers(t, "nats-server.conf", confVars(t))
	conf := map[string]*server.Permissions{}
	confAccount := map[string]string{}
	for _, u := range opts.Users {
		conf[u.Username] = u.Permissions
		if u.Account != nil {
			confAccount[u.Username] = u.Account.Name
		}
	}
	if opts.SystemAccount == "" || slices.Contains(slices.Collect(maps.Values(confAccount)), opts.SystemAccount) {
		t.Errorf("system account %q: want one, with no user", opts.SystemAccount)
	}
	accounts := embedded.FleetAccounts(protocol.Subjects{}, password)
	var users []embedded.User
	for _, a := range accounts {
		for _, u := range a.Users {
			if confAccount[u.Name] != a.Name {
				t.Errorf("embedded user %s: in account %s, in nats-server.conf %q", u.Name, a.Name, confAccount[u.Name])
			}
		}
		users = append(users, a.Users...)
	}
	compareAccounts(t, opts, accounts)
	seen := map[string]bool{}
	for _, u := range users {
		seen[u.Name] = true
		c, ok := conf[u.Name]
		if !ok {
			t.Errorf("embedded user %s: no such user in nats-server.conf", u.Name)
			continue
		}
		d := embeddedDifferences[u.Name]
		got, want := u.Permissions, c
		if got == nil || got.Publish == nil || got.Subscribe == nil {
			t.Errorf("embedded user %s: no publish or subscribe permissions", u.Name)
			continue
		}
		same(t, "embedded user "+u.Name, "publish allow", got.Publish.Allow, edit(want.Publish.Allow, d.pubAllowAdd, nil))
		same(t, "embedded user "+u.Name, "publish deny", got.Publish.Deny, edit(want.Publish.Deny, d.pubDenyAdd, d.pubDenyDrop))
		same(t, "embedded user "+u.Name, "subscribe allow", got.Subscribe.Allow, want.Subscribe.Allow)
		same(t, "embedded user "+u.Name, "subscribe deny", got.Subscribe.Deny, edit(want.Subscribe.Deny, nil, d.subDenyDrop))
		if !reflect.DeepEqual(got.Response, want.Response) {
			t.Errorf("embedded user %s: allow_responses %+v, conf %+v", u.Name, got.Response, want.Response)
		}
	}
	for name := range conf {
		if !seen[name] && !slices.Contains(notEmbedded, name) {
			t.Errorf("nats-server.conf user %s: not on the embedded server (or add it to notEmbedded)", name)
		}
	}
	for name := range embeddedDifferences {
		if !seen[name] {
			t.Errorf("embeddedDifferences names %s, not an embedded user", name)
		}
	}
}

// compareAccounts fails t unless each of accounts, on a started embedded
// server, exports and imports what the same account of a server started
// from nats-server.conf (parsed into opts) does, as each server's account
// report says.
func compareAccounts(t *testing.T, opts *server.Options, accounts []embedded.Account) {
	t.Helper()
	conf := startOpts(t, opts)
	emb, err := embedded.Start(embedded.Config{StoreDir: t.TempDir(), Accounts: accounts})
	if err != nil {
		t.Fatal(err)
	}
	defer emb.Shutdown()
	for _, a := range accounts {
		ce, ci := accountReport(t, conf, a.Name)
		ci = withoutNotEmbedded(t, ci, "account")
		ee, ei := accountReport(t, emb.NATSServer(), a.Name)
		same(t, "embedded account "+a.Name, "exports", ee, ce)
		same(t, "embedded account "+a.Name, "imports", ei, ci)
		if len(ce)+len(ci) == 0 {
			t.Errorf("account %s: neither exports nor imports", a.Name)
		}
	}
}

// startOpts starts a server from opts (a parsed configuration) on a
// random loopback port with its store in a temporary directory, until the
// test ends.
func startOpts(t *testing.T, opts *server.Options) *server.Server {
	t.Helper()
	opts.Host, opts.Port, opts.StoreDir, opts.NoSigs, opts.NoLog = "127.0.0.1", server.RANDOM_PORT, t.TempDir(), true, true
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	return s
}

// accountReport returns the exports and imports of account name on s, as
// its account report (accountz) gives them, each as JSON.
func accountReport(t *testing.T, s *server.Server, name string) (exports, imports []string) {
	t.Helper()
	z, err := s.Accountz(&server.AccountzOptions{Account: name})
	if err != nil || z.Account == nil {
		t.Fatalf("account %s: %v", name, err)
	}
	for _, e := range z.Account.Exports {
		// only the approved accounts the embedded server has: an export
		// approved for those of its own only is left out
		if len(e.ApprovedAccounts) > 0 {
			e.ApprovedAccounts = slices.DeleteFunc(e.ApprovedAccounts, func(a string) bool { return slices.Contains(notEmbeddedAccounts, a) })
			if len(e.ApprovedAccounts) == 0 {
				continue
			}
		}
		slices.Sort(e.ApprovedAccounts) // the server lists them in map order
		b, _ := json.Marshal(e)
		exports = append(exports, string(b))
	}
	for _, i := range z.Account.Imports {
		b, _ := json.Marshal(i)
		imports = append(imports, string(b))
	}
	return exports, imports
}

// withoutNotEmbedded returns the exports or imports of l (as
// accountReport gives them) but those whose field names only accounts of
// notEmbeddedAccounts.
func withoutNotEmbedded(t *testing.T, l []string, field string) []string {
	t.Helper()
	var out []string
	for _, e := range l {
		var v map[string]any
		if err := json.Unmarshal([]byte(e), &v); err != nil {
			t.Fatal(err)
		}
		var names []any
		switch f := v[field].(type) {
		case string:
			names = []any{f}
		case []any:
			names = f
		}
		keep := len(names) == 0
		for _, n := range names {
			if s, _ := n.(string); !slices.Contains(notEmbeddedAccounts, s) {
				keep = true
			}
		}
		if keep {
			out = append(out, e)
		}
	}
	return out
}

// edit returns l with add appended and drop removed (each of which must
// be in l).
func edit(l, add, drop []string) []string {
	var out []string
	for _, s := range l {
		if !slices.Contains(drop, s) {
			out = append(out, s)
		}
	}
	return append(out, add...)
}

// same fails t unless got and want (of who) hold the same subjects, in any
// order.
func same(t *testing.T, who, what string, got, want []string) {
	t.Helper()
	g, w := slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(want))
	for _, s := range w {
		if !slices.Contains(g, s) {
			t.Errorf("%s: %s lacks %q (in nats-server.conf)", who, what, s)
		}
	}
	for _, s := range g {
		if !slices.Contains(w, s) {
			t.Errorf("%s: %s has %q (not in nats-server.conf)", who, what, s)
		}
	}
}
