package agents_test

import (
	"sync"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/agents"
	"github.com/toolfleet/toolfleet/internal/coordinator"
	"github.com/toolfleet/toolfleet/internal/metrics"
	"github.com/toolfleet/toolfleet/internal/metrics/metricstest"
	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/model/scripted"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

const (
	// alpha may use echo; its model also calls calculator, beta's tool.
	alphaDoc = `{"name":"alpha","instructions":"You are alpha.","model":{"provider":"scripted","script":{"turns":[
		{"content":"both","tool_calls":[{"id":"a1","name":"calculator","arguments":{"expression":"6*7"}},{"id":"a2","name":"echo","arguments":{"text":"hi"}}]},
		{"content":"alpha done"}]}},"tools":["echo"]}`
	betaDoc = `{"name":"beta","model":{"provider":"scripted","script":{"turns":[
		{"content":"add","tool_calls":[{"id":"b1","name":"calculator","arguments":{"expression":"6*7"}}]},
		{"content":"beta: {{result \"b1\"}}"}]}},"tools":["calc*"]}`
)

// TestServingTwoAgentsDisjointScopes: one coordinator's fleet serves two
// agents with disjoint tool scopes and different models; alpha's call to
// beta's tool is unknown_tool and nothing is published on its subject;
// beta's runs use beta's model and tools; spend is counted per agent.
func TestServingTwoAgentsDisjointScopes(t *testing.T) {
	ctx := t.Context()
	c, err := coordinator.Open(ctx, coordinator.Config{Model: scripted.Demo(), StoreDir: t.TempDir(), Builtins: []string{"calculator", "echo"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	js, err := jetstream.New(c.Conn())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := natsbus.Provision(ctx, js, protocol.Subjects{}, natsbus.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	store, err := natsbus.OpenAgents(ctx, js, protocol.Subjects{})
	if err != nil {
		t.Fatal(err)
	}
	reg := &agents.Registry{Store: store}
	for _, d := range []string{alphaDoc, betaDoc} {
		if _, _, err := reg.Put(ctx, []byte(d)); err != nil {
			t.Fatal(err)
		}
	}
	reg2 := metrics.NewRegistry()
	fleet := c.Fleet()
	s := &agents.Serving{Registry: reg, Models: &agents.Models{}, Metrics: metrics.NewAgents(reg2),
		Base: fleet.Loop, Catalog: fleet.Catalog, Dispatcher: fleet.Dispatcher, Gate: fleet.Gate}

	var mu sync.Mutex
	var published []string
	sub, err := c.Conn().Subscribe("fleet.call.>", func(m *nats.Msg) { mu.Lock(); published = append(published, m.Subject); mu.Unlock() })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe() //nolint:errcheck
	c.Conn().Flush()

	runAs := func(name string) *loop.Result {
		run := protocol.NewRunID()
		j, err := natsbus.OpenJournal(ctx, js, protocol.Subjects{}, run, "test", "start")
		if err != nil {
			t.Fatal(err)
		}
		r, msgs, ref, err := s.ForRun(ctx, name, j, []loop.Message{{Role: "user", Content: "go"}})
		if err != nil || ref.Name != name {
			t.Fatalf("%s: %+v %v", name, ref, err)
		}
		res, err := r.RunDurable(ctx, loop.Durable{Messages: msgs, RunID: run, Journal: j})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return res
	}
	a := runAs("alpha")
	c.Conn().Flush()
	mu.Lock()
	for _, subj := range published {
		if subj == "fleet.call.calculator" {
			t.Fatalf("alpha's call to beta's tool was published on %s", subj)
		}
	}
	mu.Unlock()
	if a.Calls[0].Outcome != protocol.OutcomeUnknownTool || a.Calls[1].Outcome != protocol.OutcomeOK || a.Answer != "alpha done" ||
		a.Messages[0].Content != "You are alpha." {
		t.Fatalf("alpha: %+v %q %+v", a.Calls, a.Answer, a.Messages[0])
	}
	b := runAs("beta")
	if b.Calls[0].Outcome != protocol.OutcomeOK || b.Answer != "beta: 42" {
		t.Fatalf("beta: %+v %q", b.Calls, b.Answer)
	}
	if s.Models.Len() != 2 {
		t.Fatalf("%d model clients, want 2", s.Models.Len())
	}
	f := metricstest.Gather(t, reg2)
	for _, name := range []string{"alpha", "beta"} {
		if err := f.Want("toolfleet_agent_runs_total", metricstest.L("agent", name, "reason", "natural"), 1); err != nil {
			t.Error(err)
		}
	}
}
