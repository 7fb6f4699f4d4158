package e2e

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

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
