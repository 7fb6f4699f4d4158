package metrics

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolfleet/toolfleet/pkg/agent"
	"github.com/toolfleet/toolfleet/pkg/loop"
)

// MaxAgentLabels bounds the distinct agent names the agent metrics carry;
// runs of further agents are counted under "_other".
const MaxAgentLabels = 256

// Agents holds the per-agent spend of a coordinator: runs, tokens and
// cost, by agent name.
type Agents struct {
	runs   *prometheus.CounterVec
	tokens *prometheus.CounterVec
	cost   *prometheus.CounterVec

	mu    sync.Mutex
	names map[string]bool
}

// NewAgents registers the per-agent metrics with reg.
func NewAgents(reg prometheus.Registerer) *Agents {
	a := &Agents{
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Subsystem: "agent", Name: "runs_total",
			Help: "Finished runs, by agent and termination reason.",
		}, []string{"agent", "reason"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Subsystem: "agent", Name: "tokens_total",
			Help: "Model tokens reported, by agent and kind (prompt, completion).",
		}, []string{"agent", "kind"}),
		cost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Subsystem: "agent", Name: "cost_usd_total",
			Help: "Model cost in USD, by agent, priced by the agent's price table.",
		}, []string{"agent"}),
		names: map[string]bool{},
	}
	a.runs = register(reg, a.runs)
	a.tokens = register(reg, a.tokens)
	a.cost = register(reg, a.cost)
	return a
}

// label is name, or "_other" once MaxAgentLabels names are in use.
func (a *Agents) label(name string) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.names[name] {
		return name
	}
	if len(a.names) >= MaxAgentLabels {
		return "_other"
	}
	a.names[name] = true
	return name
}

// Observer returns a loop.Observer for one run of agent name, priced at
// price: it counts the run's spend under the agent and passes every
// measurement on to next (the coordinator's own metrics; nil for none).
func (a *Agents) Observer(next loop.Observer, name string, price agent.Price) loop.Observer {
	if next == nil {
		next = loop.NopObserver{}
	}
	return &agentObserver{Observer: next, a: a, name: a.label(name), price: price}
}

type agentObserver struct {
	loop.Observer
	a     *Agents
	name  string
	price agent.Price
}

func (o *agentObserver) RunEnded(reason loop.TerminationReason) {
	o.Observer.RunEnded(reason)
	o.a.runs.WithLabelValues(o.name, oneOf(string(reason), terminationReasons...)).Inc()
}

func (o *agentObserver) ModelCall(d time.Duration, u loop.Usage, err error) {
	o.Observer.ModelCall(d, u, err)
	in, out := max(u.PromptTokens, 0), max(u.CompletionTokens, 0)
	if in > 0 {
		o.a.tokens.WithLabelValues(o.name, "prompt").Add(float64(in))
	}
	if out > 0 {
		o.a.tokens.WithLabelValues(o.name, "completion").Add(float64(out))
	}
	if c := (float64(in)*o.price.Input + float64(out)*o.price.Output) / 1e6; c > 0 {
		o.a.cost.WithLabelValues(o.name).Add(c)
	}
}
