package serve_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolfleet/toolfleet/pkg/agent"
	"github.com/toolfleet/toolfleet/pkg/client"
	"github.com/toolfleet/toolfleet/pkg/fleettest"
	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/model/providers"
	"github.com/toolfleet/toolfleet/pkg/protocol"
	"github.com/toolfleet/toolfleet/pkg/serve"
)

// mathAgent is an agent scoped to the calculator, on a scripted model
// that asks it for 6 * 7 and quotes the result.
func mathAgent(t *testing.T) agent.Definition {
	t.Helper()
	d, err := agent.Parse([]byte(`{"name": "math", "instructions": "Use the calculator.",
		"model": {"provider": "scripted", "script": {"turns": [
			{"tool_calls": [{"id": "c1", "name": "calculator", "arguments": {"expression": "6 * 7"}}]},
			{"content": "6 * 7 = {{result \"c1\"}}"}]}},
		"tools": ["calculator"]}`))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// submit submits prompt as agent through pkg/client on the fleet's
// client connection and waits for the run's result.
func submit(t *testing.T, fleet *fleettest.Fleet, agentName, prompt string) (*protocol.RunResult, error) {
	t.Helper()
	c, err := client.New(fleet.ConnectClient(), client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	run, err := c.Submit(ctx, client.Request{Agent: agentName, Prompt: prompt})
	if err != nil {
		t.Fatal(err)
	}
	return c.Wait(ctx, run)
}

// TestServeAnAgentFromOutside: from the public packages only — a test
// fleet with a serving coordinator (pkg/serve), an agent stored, a run
// submitted through pkg/client — the run runs as the agent (its
// instructions first, its tool called on the fleet's worker) and its
// result is read back; the registry it was given counts the run.
func TestServeAnAgentFromOutside(t *testing.T) {
	reg := prometheus.NewRegistry()
	fleet := fleettest.Start(t, fleettest.Config{
		Tools:  []harness.Tool{harness.Calculator()},
		Agents: []agent.Definition{mathAgent(t)},
		Serve: &serve.Config{Name: "outside", Models: (&providers.Models{}).Model, Registerer: reg,
			ShutdownGrace: time.Second, PollWait: 100 * time.Millisecond},
	})
	res, err := submit(t, fleet, "math", "What is 6 * 7?")
	if err != nil {
		t.Fatal(err)
	}
	if res.Answer != "6 * 7 = 42" || res.TerminationReason != string(loop.TerminationNatural) || res.Agent != "math" || res.Coordinator != "outside" {
		t.Fatalf("result %q %q agent %q coordinator %q, want the agent's answer 6 * 7 = 42 from coordinator outside",
			res.Answer, res.TerminationReason, res.Agent, res.Coordinator)
	}
	var msgs []loop.Message
	if err := json.Unmarshal(res.Messages, &msgs); err != nil || len(msgs) == 0 || msgs[0].Role != "system" || msgs[0].Content != "Use the calculator." {
		t.Fatalf("the transcript does not open with the agent's instructions: %v %+v", err, msgs)
	}
	var calls []loop.CallRecord
	if err := json.Unmarshal(res.Calls, &calls); err != nil || len(calls) != 1 || calls[0].Outcome != protocol.OutcomeOK {
		t.Fatalf("calls %s (%v), want one ok calculator call", res.Calls, err)
	}
	if got := counterValue(t, reg, "toolfleet_agent_runs_total", "math", "natural"); got != 1 {
		t.Fatalf("toolfleet_agent_runs_total{agent=math,reason=natural} = %v, want 1", got)
	}
}

// TestServeRefusesWhatItCannotRun: fail closed — without Config.Models a
// stored agent's run is refused naming the field, and without Config.Model
// a run of the default agent (none stored) is refused; neither runs.
func TestServeRefusesWhatItCannotRun(t *testing.T) {
	fleet := fleettest.Start(t, fleettest.Config{
		Tools:  []harness.Tool{harness.Calculator()},
		Agents: []agent.Definition{mathAgent(t)},
		Serve:  &serve.Config{ShutdownGrace: time.Second, PollWait: 100 * time.Millisecond},
	})
	for _, tc := range []struct{ agent, want string }{
		{"math", "Models is not set"},
		{"", "no model of its own"},
	} {
		res, err := submit(t, fleet, tc.agent, "What is 6 * 7?")
		var refused *client.RefusedError
		if !errors.As(err, &refused) || refused.Code != protocol.CodeInvalidField || refused.Field != "agent" || !strings.Contains(refused.Message, tc.want) {
			t.Fatalf("agent %q: %v, want refused invalid_field agent saying %q", tc.agent, err, tc.want)
		}
		if res.Calls != nil || res.Answer != "" {
			t.Fatalf("agent %q: the refused run ran: %+v", tc.agent, res)
		}
	}
}

// counterValue returns the value of the series of counter name whose
// label values (in the labels' name order) are labels.
func counterValue(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			var vals []string
			for _, l := range m.GetLabel() {
				vals = append(vals, l.GetValue())
			}
			if strings.Join(vals, ",") == strings.Join(labels, ",") {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no %s%v in the registry", name, labels)
	return 0
}
