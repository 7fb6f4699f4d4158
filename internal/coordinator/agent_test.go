package coordinator_test

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolfleet/toolfleet/internal/coordinator"
	"github.com/toolfleet/toolfleet/internal/testsync"
	"github.com/toolfleet/toolfleet/pkg/agent"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/loop/looptest"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// TestAgentScopeNothingPublishedOutOfScope: an agent scoped to echo, on a
// real embedded server whose in-process worker serves calculator and echo.
// The model is offered only echo; its call to calculator is answered
// unknown_tool, and nothing is published on fleet.call.calculator, while
// its echo call is (the subscription sees the fleet's calls).
func TestAgentScopeNothingPublishedOutOfScope(t *testing.T) {
	def, err := agent.Parse([]byte(`{"name":"scoped","instructions":"Only echo.",
		"model":{"provider":"scripted","script":{"turns":[{"content":"done"}]}},"tools":["ech*"]}`))
	if err != nil {
		t.Fatal(err)
	}
	model := looptest.NewModel(
		looptest.Calls(looptest.Call("c1", "calculator", `{"expression":"1+1"}`), looptest.Call("c2", "echo", `{"text":"hi"}`)),
		looptest.Answer("done"),
	)
	c, err := coordinator.Open(t.Context(), coordinator.Config{
		Model: model, StoreDir: t.TempDir(), Builtins: []string{"calculator", "echo"}, Agent: &def,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var mu sync.Mutex
	var subjects []string
	sub, err := c.Conn().Subscribe("fleet.call.>", func(m *nats.Msg) {
		mu.Lock()
		subjects = append(subjects, m.Subject)
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe() //nolint:errcheck
	if err := c.Conn().Flush(); err != nil {
		t.Fatal(err)
	}

	res, err := c.Run(t.Context(), "add and echo")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]protocol.Outcome{}
	for _, r := range res.Calls {
		out[r.CallID] = r.Outcome
	}
	if out["c1"] != protocol.OutcomeUnknownTool || out["c2"] != protocol.OutcomeOK {
		t.Fatalf("outcomes %v, want calculator unknown_tool and echo ok", out)
	}
	// The subscription's handler runs on its own goroutine, so the echo
	// call may reach it after the run has its answer: wait for it, then
	// look at everything seen by then (a call on calculator would have
	// been published in the same round, before echo's answer came back).
	var seen []string
	testsync.WaitFor(t, 10*time.Second, func() error {
		mu.Lock()
		seen = append([]string(nil), subjects...)
		mu.Unlock()
		if !slices.ContainsFunc(seen, func(s string) bool { return strings.HasPrefix(s, "fleet.call.echo.") }) {
			return fmt.Errorf("the subscription saw %v, not the echo call", seen)
		}
		return nil
	})
	for _, s := range seen {
		if strings.HasPrefix(s, "fleet.call.calculator.") {
			t.Fatalf("a call was published on %s", s)
		}
	}
	reqs := model.Requests()
	for _, r := range reqs {
		if len(r.Tools) != 1 || r.Tools[0].Name != "echo" {
			t.Fatalf("the model was offered %+v, want echo only", r.Tools)
		}
	}
	if m := reqs[0].Messages; m[0].Role != "system" || m[0].Content != "Only echo." {
		t.Fatalf("the run does not open with the agent's instructions: %+v", m[0])
	}
	if res.TerminationReason != loop.TerminationNatural {
		t.Fatalf("termination %q", res.TerminationReason)
	}
}
