package metrics_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/internal/metrics"
	"github.com/toolfleet/toolfleet/internal/metrics/metricstest"
	"github.com/toolfleet/toolfleet/pkg/agent"
	"github.com/toolfleet/toolfleet/pkg/loop"
)

// TestAgentMetrics: a run's spend is counted under its agent, priced, and
// passed on to the coordinator's own metrics; agent labels are bounded.
func TestAgentMetrics(t *testing.T) {
	reg := metrics.NewRegistry()
	c := metrics.NewCoordinator(reg)
	a := metrics.NewAgents(reg)
	o := a.Observer(c, "support", agent.Price{Input: 2, Output: 10})
	o.RunStarted()
	o.ModelCall(time.Second, loop.Usage{PromptTokens: 1000, CompletionTokens: 100}, nil)
	o.RunEnded(loop.TerminationBudgetExhausted)
	for i := range metrics.MaxAgentLabels + 5 {
		a.Observer(nil, fmt.Sprintf("a%d", i), agent.Price{}).RunEnded(loop.TerminationNatural)
	}
	f := metricstest.Gather(t, reg)
	for _, w := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"toolfleet_agent_runs_total", metricstest.L("agent", "support", "reason", "budget_exhausted"), 1},
		{"toolfleet_agent_tokens_total", metricstest.L("agent", "support", "kind", "prompt"), 1000},
		{"toolfleet_agent_tokens_total", metricstest.L("agent", "support", "kind", "completion"), 100},
		{"toolfleet_agent_cost_usd_total", metricstest.L("agent", "support"), 0.003},
		{"toolfleet_coordinator_runs_total", metricstest.L("reason", "budget_exhausted"), 1},
		{"toolfleet_model_tokens_total", metricstest.L("kind", "prompt"), 1000},
		{"toolfleet_agent_runs_total", metricstest.L("agent", "_other", "reason", "natural"), 6},
	} {
		if err := f.Want(w.name, w.labels, w.want); err != nil {
			t.Error(err)
		}
	}
}
