package agents_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/agents"
	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natsbus/stores"
	"github.com/toolfleet/toolfleet/internal/natstest"
	"github.com/toolfleet/toolfleet/pkg/agent"
	"github.com/toolfleet/toolfleet/pkg/config"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

const doc = `{"name":"support","model":{"provider":"openai","name":"gpt-4.1-mini","api_key_env":"SUPPORT_API_KEY"},"tools":["kb_*"]}`

func fleet(t *testing.T) (*agents.Registry, jetstream.JetStream, string) {
	t.Helper()
	srv := natstest.Start(t)
	js, err := jetstream.New(natstest.Connect(t, srv))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := natsbus.Provision(t.Context(), js, protocol.Subjects{}, natsbus.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	store, err := stores.OpenAgents(t.Context(), js, protocol.Subjects{})
	if err != nil {
		t.Fatal(err)
	}
	env := func(n string) (string, bool) { return "k", n == "SUPPORT_API_KEY" }
	return &agents.Registry{Store: store, LookupEnv: env}, js, srv.ClientURL()
}

// TestRegistryRefusesHostileDefinitions: a hostile definition is refused
// naming its field, and nothing is stored.
func TestRegistryRefusesHostileDefinitions(t *testing.T) {
	reg, _, _ := fleet(t)
	ctx := t.Context()
	many := `"t0"` + strings.Repeat(`,"t"`, 0)
	for i := 1; i < 10000; i++ {
		many += `,"x` + strings.Repeat("y", i%50) + string(rune('a'+i%26)) + `"`
	}
	cases := map[string]string{
		"instructions":                     strings.Replace(doc, `"tools"`, `"instructions":"`+strings.Repeat("a", 1<<20)+`","tools"`, 1),
		"tools":                            strings.Replace(doc, `["kb_*"]`, "["+many+"]", 1),
		"budget.prices.gpt-4.1-mini.input": strings.Replace(doc, `"tools"`, `"budget":{"prices":{"gpt-4.1-mini":{"input":-1,"output":1}}},"tools"`, 1),
		"model.api_key_env":                strings.Replace(doc, "SUPPORT_API_KEY", "UNSET_API_KEY", 1),
		"model.name":                       strings.Replace(doc, `gpt-4.1-mini"`, `gpt-4.1-mini\ninjected"`, 1),
	}
	for field, d := range cases {
		_, _, err := reg.Put(ctx, []byte(d))
		var ce config.Error
		if !errors.As(err, &ce) || ce.ConfigField() != field {
			t.Errorf("%s: %v", field, err)
		}
	}
	if names, err := reg.Store.Names(ctx); err != nil || len(names) != 0 {
		t.Fatalf("stored %v (%v) after refused definitions", names, err)
	}
}

// TestRegistryRevisions: each put is a revision; a run pinned to an old
// one reads it after the agent changed.
func TestRegistryRevisions(t *testing.T) {
	reg, _, _ := fleet(t)
	ctx := t.Context()
	_, r1, err := reg.Put(ctx, []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	_, r2, err := reg.Put(ctx, []byte(strings.Replace(doc, "kb_*", "crm_*", 1)))
	if err != nil || r2 <= r1 {
		t.Fatalf("second put: rev %d after %d: %v", r2, r1, err)
	}
	d, rev, err := reg.Resolve(ctx, "support")
	if err != nil || rev != r2 || d.Tools[0] != "crm_*" {
		t.Fatalf("newest: %+v %d %v", d, rev, err)
	}
	old, err := reg.ResolveRevision(ctx, agent.Ref{Name: "support", Revision: r1})
	if err != nil || old.Tools[0] != "kb_*" {
		t.Fatalf("revision %d: %+v %v", r1, old, err)
	}
	if _, _, err := reg.Resolve(ctx, ""); !errors.Is(err, agents.ErrNotFound) {
		t.Fatalf("no default agent: %v", err)
	}
}

// TestRegistryRefusesForgedStoredDefinition: a definition written around
// Put (nats kv put) is validated again when resolved.
func TestRegistryRefusesForgedStoredDefinition(t *testing.T) {
	reg, js, _ := fleet(t)
	kv, _ := js.KeyValue(t.Context(), "fleet_agents")
	if _, err := kv.Put(t.Context(), "support", []byte(`{"name":"support","model":{"provider":"openai","name":"a\nb"}}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(t.Context(), "other", []byte(doc)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := reg.Resolve(t.Context(), "support"); !agents.IsConfig(err) {
		t.Fatalf("a forged definition: %v", err)
	}
	if _, _, err := reg.Resolve(t.Context(), "other"); err == nil || !strings.Contains(err.Error(), "named support") {
		t.Fatalf("a definition stored under another name: %v", err)
	}
}

// TestResumedRunKeepsItsRevision: a run journals the agent revision it
// started on; the agent is updated; the run resumed from its journal (by
// another owner) gets the revision it started on, a new run the newest.
func TestResumedRunKeepsItsRevision(t *testing.T) {
	reg, js, _ := fleet(t)
	ctx := t.Context()
	if _, _, err := reg.Put(ctx, []byte(doc)); err != nil {
		t.Fatal(err)
	}
	run := protocol.NewRunID()
	j, err := stores.OpenJournal(ctx, js, protocol.Subjects{}, run, "coordinator-a", "start")
	if err != nil {
		t.Fatal(err)
	}
	d, ref, pin, err := reg.ForRun(ctx, "support", j.Entries())
	if err != nil || !pin || d.Tools[0] != "kb_*" {
		t.Fatalf("start: %+v %+v %v %v", d, ref, pin, err)
	}
	if err := j.Append(ctx, agent.JournalEntry(ref)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := reg.Put(ctx, []byte(strings.Replace(doc, "kb_*", "deploy", 1))); err != nil {
		t.Fatal(err)
	}
	j2, err := stores.OpenJournal(ctx, js, protocol.Subjects{}, run, "coordinator-b", "resume")
	if err != nil {
		t.Fatal(err)
	}
	d2, ref2, pin2, err := reg.ForRun(ctx, "support", j2.Entries())
	if err != nil || pin2 || ref2 != ref || d2.Tools[0] != "kb_*" {
		t.Fatalf("resumed: %+v %+v %v %v", d2, ref2, pin2, err)
	}
	d3, _, _, err := reg.ForRun(ctx, "support", nil)
	if err != nil || d3.Tools[0] != "deploy" {
		t.Fatalf("a new run: %+v %v", d3, err)
	}
}
