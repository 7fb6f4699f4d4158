package deploy

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/agents"
	"github.com/toolfleet/toolfleet/internal/natsbus/stores"
	"github.com/toolfleet/toolfleet/internal/natscli"
	"github.com/toolfleet/toolfleet/pkg/agent"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

const agentDoc = `{"name":"support","model":{"provider":"anthropic","name":"claude-sonnet-4-5"},"tools":["kb_*"]}`

// TestConfAgentsWrittenByAdminAndOperatorOnly: under the shipped
// permissions admin and operator write agent definitions, coordinators
// read them (by revision too) and may neither write nor remove one, and
// workers and clients may do neither.
func TestConfAgentsWrittenByAdminAndOperatorOnly(t *testing.T) {
	t.Parallel()
	s := startFromConf(t)
	ctx := t.Context()
	provision(t, s)
	subjects := protocol.Subjects{}
	store := func(user string) *stores.AgentStore {
		c := connectAs(t, s, user)
		st, err := stores.OpenAgents(ctx, c.js, subjects)
		if err != nil {
			t.Fatalf("%s opening the agents bucket: %v", user, err)
		}
		return st
	}
	for _, user := range []string{"admin", "operator"} {
		reg := &agents.Registry{Store: store(user)}
		if _, _, err := reg.Put(ctx, []byte(agentDoc)); err != nil {
			t.Fatalf("%s putting an agent: %v", user, err)
		}
	}
	coord := connectAs(t, s, "coordinator")
	reg := &agents.Registry{Store: store("coordinator")}
	d, rev, err := reg.Resolve(ctx, "support")
	if err != nil || d.Name != "support" || rev != 2 {
		t.Fatalf("coordinator resolving: %+v rev %d: %v", d, rev, err)
	}
	if _, err := reg.ResolveRevision(ctx, agent.Ref{Name: "support", Revision: 1}); err != nil {
		t.Fatalf("coordinator reading revision 1: %v", err)
	}
	// Nobody but admin and operator writes: a put is a publish on the
	// bucket's subject, refused by the server.
	for _, user := range []string{"coordinator", "worker", "client", "worker_deploy"} {
		c := connectAs(t, s, user)
		if !refusedPub(t, c, "$KV.fleet_agents.support") {
			t.Errorf("%s may write an agent definition", user)
		}
	}
	if !refusedPub(t, coord, "$JS.API.STREAM.MSG.DELETE.KV_fleet_agents") {
		t.Error("the coordinator may remove an agent revision")
	}
	for _, user := range []string{"worker", "client"} {
		c := connectAs(t, s, user)
		if _, err := c.js.KeyValue(quick(t), subjects.AgentsBucket()); err == nil {
			t.Errorf("%s may open the agents bucket", user)
		}
	}
	// What the coordinator's refused put left: still revision 2.
	if _, rev, err := reg.Resolve(ctx, "support"); err != nil || rev != 2 {
		t.Fatalf("after the refused writes: rev %d, %v", rev, err)
	}
	// The operator removes it; the revision a run started on stays readable.
	op := store("operator")
	if err := op.Delete(ctx, "support"); err != nil {
		t.Fatalf("operator removing: %v", err)
	}
	if _, _, err := reg.Resolve(ctx, "support"); !errors.Is(err, agents.ErrNotFound) {
		t.Fatalf("resolving a removed agent: %v", err)
	}
	if _, err := reg.ResolveRevision(ctx, agent.Ref{Name: "support", Revision: 2}); err != nil {
		t.Fatalf("reading the revision of a removed agent: %v", err)
	}
}

// TestConfAgentsNatsCLI: the nats kv commands docs/agents.md gives work
// as the operator user.
func TestConfAgentsNatsCLI(t *testing.T) {
	t.Parallel()
	s := startFromConf(t)
	ctx := t.Context()
	provision(t, s)
	nats := natscli.Path(t)
	env := append(natscli.Env(t), "NATS_URL="+s.ClientURL(), "NATS_USER=operator", "NATS_PASSWORD="+passwords["operator"])
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"kv", "put", "fleet_agents", "support", agentDoc}, "claude-sonnet-4-5"},
		{[]string{"kv", "get", "fleet_agents", "support", "--raw"}, `"name":"support"`},
		{[]string{"kv", "ls", "fleet_agents"}, "support"},
		{[]string{"kv", "history", "fleet_agents", "support"}, "support"},
		{[]string{"kv", "del", "fleet_agents", "support", "-f"}, ""},
	} {
		c := exec.CommandContext(ctx, nats, append([]string{"--inbox-prefix", inboxOf("operator")}, tc.args...)...)
		c.Env = env
		c.Stdin = strings.NewReader("")
		b, err := runWithin(c, 20*time.Second)
		if err != nil || !strings.Contains(string(b), tc.want) {
			t.Errorf("nats %s: %v; want output with %q:\n%s", strings.Join(tc.args, " "), err, tc.want, b)
		}
	}
	c := connectAs(t, s, "coordinator")
	kv, err := c.js.KeyValue(ctx, protocol.Subjects{}.AgentsBucket())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get(ctx, "support"); !errors.Is(err, jetstream.ErrKeyNotFound) && !errors.Is(err, jetstream.ErrKeyDeleted) {
		t.Fatalf("after nats kv del: %v", err)
	}
}
