package agents

import (
	"context"
	"fmt"
	"sync"

	"github.com/toolfleet/toolfleet/internal/metrics"
	"github.com/toolfleet/toolfleet/pkg/agent"
	"github.com/toolfleet/toolfleet/pkg/loop"
)

// maxRunners bounds the runners a [Serving] keeps; when full it starts
// over.
const maxRunners = 256

// Serving is what a serving coordinator needs to run every agent of the
// fleet: for each run, the agent's revision (pinned in the run's journal),
// a runner with the agent's model, tools, limits, approvals and budget,
// and the run's transcript opening with its instructions. Runners are
// made once per agent revision and reused.
type Serving struct {
	// Registry reads the definitions.
	Registry *Registry
	// Models makes the model client of an agent's model (one per
	// configuration, reused: providers.Models.Model). Required.
	Models func(agent.Model) (loop.Model, error)
	// Metrics counts the per-agent spend; nil counts nothing.
	Metrics *metrics.Agents
	// Base is the coordinator's loop configuration (logger, observer,
	// tracer, its own limits) that each agent's applies over; Limit, when
	// set, applies the coordinator's ceilings to the result.
	Base  loop.Config
	Limit func(loop.Config) loop.Config
	// Catalog, Dispatcher and Gate are the coordinator's.
	Catalog    loop.Catalog
	Dispatcher loop.Dispatcher
	Gate       loop.Gate

	mu      sync.Mutex
	runners map[agent.Ref]*loop.Runner
}

// ForRun returns the runner and the transcript of one durable run of
// agent name ("" is the default agent) whose journal is j: on a resumed
// run, the revision its journal names; on a new one, the newest, pinned
// in j before the run starts. ErrNotFound for an agent the fleet does not
// hold: for the default agent the caller runs as it did without agents,
// for any other it refuses the run.
func (s *Serving) ForRun(ctx context.Context, name string, j loop.Journal, msgs []loop.Message) (*loop.Runner, []loop.Message, agent.Ref, error) {
	d, ref, pin, err := s.Registry.ForRun(ctx, name, j.Entries())
	if err != nil {
		return nil, nil, ref, err
	}
	if pin {
		if err := j.Append(ctx, agent.JournalEntry(ref)); err != nil {
			return nil, nil, ref, fmt.Errorf("agents: journaling the agent: %w", err)
		}
	}
	r, err := s.runner(d, ref)
	if err != nil {
		return nil, nil, ref, err
	}
	return r, d.Messages(msgs), ref, nil
}

// Prepared is one run's agent, resolved and pinned: what loop.New and
// Runner.RunDurable need to run it.
type Prepared struct {
	// Ref is the agent and revision the run runs on.
	Ref agent.Ref
	// Definition is that revision's definition.
	Definition agent.Definition
	// Config is base with the agent's limits, approvals, budget, window,
	// summarizer and per-agent metrics.
	Config loop.Config
	// Model is the agent's model client (shared with every run of the
	// same configuration).
	Model loop.Model
	// Catalog is the catalog scoped to the agent's tools.
	Catalog loop.Catalog
	// Messages is the run's transcript, opening with the instructions.
	Messages []loop.Message
}

// Prepare resolves the agent of one durable run as [Serving.ForRun] does,
// pinning a new run's revision in j, and returns what a caller that makes
// its own runner per run needs: base (the run's loop configuration, with
// the coordinator's ceilings and the request's lowered limits already
// applied, or to be applied to Prepared.Config) turned into the agent's,
// catalog scoped, msgs opened with the instructions.
func (s *Serving) Prepare(ctx context.Context, name string, j loop.Journal, base loop.Config, catalog loop.Catalog, msgs []loop.Message) (*Prepared, error) {
	d, ref, pin, err := s.Registry.ForRun(ctx, name, j.Entries())
	if err != nil {
		return nil, err
	}
	if pin {
		if err := j.Append(ctx, agent.JournalEntry(ref)); err != nil {
			return nil, fmt.Errorf("agents: journaling the agent: %w", err)
		}
	}
	cfg, m, err := s.config(d, base)
	if err != nil {
		return nil, err
	}
	return &Prepared{Ref: ref, Definition: d, Config: cfg, Model: m, Catalog: d.Catalog(catalog), Messages: d.Messages(msgs)}, nil
}

// config is base turned into d's loop configuration, and d's model.
func (s *Serving) config(d agent.Definition, base loop.Config) (loop.Config, loop.Model, error) {
	m, err := s.Models(d.Model)
	if err != nil {
		return loop.Config{}, nil, err
	}
	cfg := d.LoopConfig(base)
	if d.Summarizer != nil {
		if cfg.Summarizer, err = s.Models(*d.Summarizer); err != nil {
			return loop.Config{}, nil, err
		}
	}
	if s.Metrics != nil {
		cfg.Observer = s.Metrics.Observer(cfg.Observer, d.Name, d.Budget.Prices[d.Model.Name])
	}
	if s.Limit != nil {
		cfg = s.Limit(cfg)
	}
	return cfg, m, nil
}

// runner is the runner of one agent revision, made on first use.
func (s *Serving) runner(d agent.Definition, ref agent.Ref) (*loop.Runner, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.runners[ref]; r != nil {
		return r, nil
	}
	cfg, m, err := s.config(d, s.Base)
	if err != nil {
		return nil, err
	}
	r, err := loop.New(cfg, m, d.Catalog(s.Catalog), s.Dispatcher, s.Gate)
	if err != nil {
		return nil, fmt.Errorf("agents: %s revision %d: %w", ref.Name, ref.Revision, err)
	}
	if s.runners == nil || len(s.runners) >= maxRunners {
		s.runners = map[agent.Ref]*loop.Runner{}
	}
	s.runners[ref] = r
	return r, nil
}
