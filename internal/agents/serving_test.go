package agents_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/agents"
	"github.com/toolfleet/toolfleet/internal/coordinator"
	"github.com/toolfleet/toolfleet/internal/metrics"
	"github.com/toolfleet/toolfleet/internal/metrics/metricstest"
	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natsbus/stores"
	"github.com/toolfleet/toolfleet/pkg/agent"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/loop/looptest"
	"github.com/toolfleet/toolfleet/pkg/model/providers"
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
	store, err := stores.OpenAgents(ctx, js, protocol.Subjects{})
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
	models := &providers.Models{}
	s := &agents.Serving{Registry: reg, Models: models.Model, Metrics: metrics.NewAgents(reg2),
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
		j, err := stores.OpenJournal(ctx, js, protocol.Subjects{}, run, "test", "start")
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
		if strings.HasPrefix(subj, "fleet.call.calculator.") {
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
	if models.Len() != 2 {
		t.Fatalf("%d model clients, want 2", models.Len())
	}
	f := metricstest.Gather(t, reg2)
	for _, name := range []string{"alpha", "beta"} {
		if err := f.Want("toolfleet_agent_runs_total", metricstest.L("agent", name, "reason", "natural"), 1); err != nil {
			t.Error(err)
		}
	}
}

// handOffAfterRound closes handoff once a round's observations are
// journaled: the run stops there, as when its coordinator is stopped.
type handOffAfterRound struct {
	loop.Journal
	handoff chan struct{}
}

func (h *handOffAfterRound) Append(ctx context.Context, e loop.JournalEntry) error {
	err := h.Journal.Append(ctx, e)
	if e.Kind == loop.EntryObserved {
		close(h.handoff)
	}
	return err
}

// TestServingResumeKeepsTheRevision: a run of rev 1 is handed off after
// its first round; the agent is updated; another coordinator (its own
// Serving) resumes the run from its journal and finishes it on rev 1.
func TestServingResumeKeepsTheRevision(t *testing.T) {
	ctx := t.Context()
	c, err := coordinator.Open(ctx, coordinator.Config{Model: scripted.Demo(), StoreDir: t.TempDir(), Builtins: []string{"echo"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	js, _ := jetstream.New(c.Conn())
	if _, err := natsbus.Provision(ctx, js, protocol.Subjects{}, natsbus.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	store, _ := stores.OpenAgents(ctx, js, protocol.Subjects{})
	reg := &agents.Registry{Store: store}
	version := func(v string) string {
		return `{"name":"pinned","model":{"provider":"scripted","script":{"turns":[
			{"content":"","tool_calls":[{"id":"c1","name":"echo","arguments":{"text":"` + v + `"}}]},
			{"content":"answer ` + v + `: {{result \"c1\"}}"}]}},"tools":["echo"]}`
	}
	if _, _, err := reg.Put(ctx, []byte(version("v1"))); err != nil {
		t.Fatal(err)
	}
	serving := func() *agents.Serving {
		f := c.Fleet()
		return &agents.Serving{Registry: reg, Models: (&providers.Models{}).Model, Base: f.Loop, Catalog: f.Catalog, Dispatcher: f.Dispatcher, Gate: f.Gate}
	}
	input := []loop.Message{{Role: "user", Content: "go"}}
	run := protocol.NewRunID()
	j, err := stores.OpenJournal(ctx, js, protocol.Subjects{}, run, "coordinator-a", "start")
	if err != nil {
		t.Fatal(err)
	}
	h := &handOffAfterRound{Journal: j, handoff: make(chan struct{})}
	r, msgs, ref, err := serving().ForRun(ctx, "pinned", h, input)
	if err != nil || ref.Revision != 1 {
		t.Fatalf("%+v %v", ref, err)
	}
	if _, err := r.RunDurable(ctx, loop.Durable{Messages: msgs, RunID: run, Journal: h, Handoff: h.handoff}); !errors.Is(err, loop.ErrHandedOff) {
		t.Fatalf("first owner: %v, want a hand-off", err)
	}
	if _, rev, err := reg.Put(ctx, []byte(version("v2"))); err != nil || rev != 2 {
		t.Fatalf("update: %d %v", rev, err)
	}
	j2, err := stores.OpenJournal(ctx, js, protocol.Subjects{}, run, "coordinator-b", "resume")
	if err != nil {
		t.Fatal(err)
	}
	r2, msgs2, ref2, err := serving().ForRun(ctx, "pinned", j2, input)
	if err != nil || ref2 != ref {
		t.Fatalf("resumed on %+v (%v), want %+v", ref2, err, ref)
	}
	res, err := r2.RunDurable(ctx, loop.Durable{Messages: msgs2, RunID: run, Journal: j2})
	if err != nil || res.Answer != "answer v1: v1" {
		t.Fatalf("resumed run: %q %v", res.Answer, err)
	}
	// A new run gets the new revision.
	j3, _ := stores.OpenJournal(ctx, js, protocol.Subjects{}, protocol.NewRunID(), "coordinator-b", "start")
	if _, _, ref3, err := serving().ForRun(ctx, "pinned", j3, input); err != nil || ref3.Revision != 2 {
		t.Fatalf("a new run: %+v %v", ref3, err)
	}
}

// TestServingPrepare: a caller that makes its own runner per run gets the
// agent's config, model, scoped catalog and transcript, and the revision
// pinned in the journal.
func TestServingPrepare(t *testing.T) {
	reg, js, _ := fleet(t)
	ctx := t.Context()
	if _, _, err := reg.Put(ctx, []byte(strings.Replace(doc, `"tools"`, `"instructions":"hello","limits":{"max_rounds":3},"tools"`, 1))); err != nil {
		t.Fatal(err)
	}
	run := protocol.NewRunID()
	j, _ := stores.OpenJournal(ctx, js, protocol.Subjects{}, run, "a", "start")
	s := &agents.Serving{Registry: reg, Models: (&providers.Models{Getenv: func(string) string { return "k" }}).Model}
	p, err := s.Prepare(ctx, "support", j, loop.Config{MaxRounds: 8}, looptest.NewCatalog(looptest.MustSpec("kb_find", `{"type":"object"}`), looptest.MustSpec("deploy", `{"type":"object"}`)),
		[]loop.Message{{Role: "user", Content: "hi"}})
	if err != nil {
		t.Fatal(err)
	}
	specs, _ := p.Catalog.Tools(ctx)
	if p.Config.MaxRounds != 3 || p.Model == nil || len(specs) != 1 || specs[0].Name != "kb_find" || p.Messages[0].Content != "hello" || p.Ref.Revision != 1 {
		t.Fatalf("%+v %v", p, specs)
	}
	j2, _ := stores.OpenJournal(ctx, js, protocol.Subjects{}, run, "b", "resume")
	if ref, ok := agent.FromJournal(j2.Entries()); !ok || ref != p.Ref {
		t.Fatalf("journal pins %+v %v", ref, ok)
	}
}
