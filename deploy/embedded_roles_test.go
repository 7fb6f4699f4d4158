package deploy_test

import (
	"reflect"
	"slices"
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/toolfleet/toolfleet/internal/embedded"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// embeddedDifferences are the intended differences between a role of
// deploy/nats-server.conf and the same role on a fleet's listening
// embedded server (embedded.FleetUsers), by user: what the embedded role
// adds to and removes from each list of the conf's.
var embeddedDifferences = map[string]struct {
	pubAllowAdd, pubDenyDrop, pubDenyAdd, subDenyDrop []string
}{
	// The embedded server has no admin: its own coordinator provisions the
	// streams and buckets, so it may create and update them. It still may
	// neither delete nor purge one, nor remove an audit record or an
	// execution record.
	embedded.RoleCoordinator: {
		pubDenyDrop: []string{"$JS.API.STREAM.CREATE.>", "$JS.API.STREAM.UPDATE.>",
			// deploy's own record streams, which the embedded server lacks
			"$JS.API.STREAM.MSG.DELETE.FLEET_CLAIMS_deploy", "$JS.API.STREAM.MSG.DELETE.FLEET_STARTS_deploy"},
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

// TestEmbeddedRolesMatchConf: every role of a listening embedded server
// (embedded.FleetUsers, default prefix) has exactly the permissions of the
// same user in deploy/nats-server.conf, but for the differences named in
// embeddedDifferences. A change to either that the other lacks fails here.
func TestEmbeddedRolesMatchConf(t *testing.T) {
	_, opts := confUsers(t, "nats-server.conf", confVars(t))
	conf := map[string]*server.Permissions{}
	for _, u := range opts.Users {
		conf[u.Username] = u.Permissions
	}
	users := embedded.FleetUsers(protocol.Subjects{}, func(role string) string { return "pw-" + role })
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
		same(t, u.Name, "publish allow", got.Publish.Allow, edit(want.Publish.Allow, d.pubAllowAdd, nil))
		same(t, u.Name, "publish deny", got.Publish.Deny, edit(want.Publish.Deny, d.pubDenyAdd, d.pubDenyDrop))
		same(t, u.Name, "subscribe allow", got.Subscribe.Allow, want.Subscribe.Allow)
		same(t, u.Name, "subscribe deny", got.Subscribe.Deny, edit(want.Subscribe.Deny, nil, d.subDenyDrop))
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

// same fails t unless got and want hold the same subjects, in any order.
func same(t *testing.T, user, what string, got, want []string) {
	t.Helper()
	g, w := slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(want))
	for _, s := range w {
		if !slices.Contains(g, s) {
			t.Errorf("embedded user %s: %s lacks %q (in nats-server.conf)", user, what, s)
		}
	}
	for _, s := range g {
		if !slices.Contains(w, s) {
			t.Errorf("embedded user %s: %s has %q (not in nats-server.conf)", user, what, s)
		}
	}
}
