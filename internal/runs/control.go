package runs

import (
	"context"
	"fmt"

	"github.com/toolfleet/toolfleet/internal/agents"
	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natsbus/stores"
	"github.com/toolfleet/toolfleet/pkg/agent"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// AgentModelFunc makes the model client of an agent's model
// (providers.Models.Model in the coordinator's binary).
type AgentModelFunc func(agent.Model) (loop.Model, error)

// ReplayOptions say what a replay changes: the agent revision it runs
// on, its instructions, its model.
type ReplayOptions struct {
	// AgentRevision, when not 0, is the revision of the run's agent whose
	// instructions, model and limits the replay runs with.
	AgentRevision uint64
	// Instructions, when set, replace the run's (or the revision's).
	Instructions string
	// Model, when set, is the replay's model; else the agent revision's
	// (the run's own revision without AgentRevision), made by AgentModels.
	Model loop.Model
	// AgentModels makes an agent revision's model. Without it a replay
	// of an agent's run needs Model.
	AgentModels AgentModelFunc
}

// entries reads run's journal: its entries, in order.
func entries(ctx context.Context, js natsbus.JetStream, subjects protocol.Subjects, run protocol.RunID) ([]loop.JournalEntry, error) {
	recs, err := stores.ReadJournal(ctx, js, subjects, run)
	if err != nil {
		return nil, err
	}
	if len(recs) == 0 {
		return nil, fmt.Errorf("run %s: %w", run, ErrNoJournal)
	}
	es := make([]loop.JournalEntry, len(recs))
	for i, r := range recs {
		es[i] = r.Entry
	}
	return es, nil
}

// Replay re-runs the model steps of the ended run against its journal
// (loop.Replay): nothing is published and nothing runs. It reads the
// journal stream and, for the run's agent, the agents bucket: what the
// operator may read. readCtx bounds the reads; ctx the replay itself.
func Replay(ctx, readCtx context.Context, js natsbus.JetStream, subjects protocol.Subjects, run protocol.RunID, o ReplayOptions) (*loop.ReplayReport, error) {
	es, err := entries(readCtx, js, subjects, run)
	if err != nil {
		return nil, err
	}
	in := loop.ReplayInput{Entries: es, Instructions: o.Instructions}
	var cfg loop.Config
	model := o.Model
	if ref, ok := agent.FromJournal(es); ok && (model == nil || o.AgentRevision != 0) {
		if o.AgentRevision != 0 {
			ref.Revision = o.AgentRevision
		}
		d, err := agentRevision(readCtx, js, subjects, ref)
		if err != nil {
			return nil, err
		}
		cfg = d.LoopConfig(cfg)
		if in.Instructions == "" && o.AgentRevision != 0 {
			in.Instructions = d.Instructions
		}
		if model == nil {
			if o.AgentModels == nil {
				return nil, fmt.Errorf("run %s ran on agent %s, whose model cannot be made here: give --model", run, ref.Name)
			}
			if model, err = o.AgentModels(d.Model); err != nil {
				return nil, fmt.Errorf("the model of agent %s revision %d: %w", ref.Name, ref.Revision, err)
			}
		}
	} else if o.AgentRevision != 0 {
		return nil, fmt.Errorf("run %s ran on no agent: --agent-revision has nothing to name", run)
	}
	if model == nil {
		return nil, fmt.Errorf("run %s ran on the coordinator's own model, which its journal does not name: give --model", run)
	}
	return loop.Replay(ctx, cfg, model, in)
}

// agentRevision reads one revision of an agent from the agents bucket.
func agentRevision(ctx context.Context, js natsbus.JetStream, subjects protocol.Subjects, ref agent.Ref) (agent.Definition, error) {
	store, err := stores.OpenAgents(ctx, js, subjects)
	if err != nil {
		return agent.Definition{}, err
	}
	d, err := (&agents.Registry{Store: store}).ResolveRevision(ctx, ref)
	if err != nil {
		return agent.Definition{}, fmt.Errorf("agent %s revision %d: %w", ref.Name, ref.Revision, err)
	}
	return d, nil
}

// Fork returns the transcript of a fork of the ended run at round at
// (loop.ForkMessages), with more appended at the fork point. For a run of
// an agent, the agent's instructions are left out: the agent a fork is
// submitted to gives its own.
func Fork(ctx context.Context, js natsbus.JetStream, subjects protocol.Subjects, run protocol.RunID, at int, more []loop.Message) ([]loop.Message, error) {
	es, err := entries(ctx, js, subjects, run)
	if err != nil {
		return nil, err
	}
	msgs, err := loop.ForkMessages(ctx, es, at)
	if err != nil {
		return nil, err
	}
	if ref, ok := agent.FromJournal(es); ok && len(msgs) > 0 && msgs[0].Role == "system" {
		d, err := agentRevision(ctx, js, subjects, ref)
		if err != nil {
			return nil, err
		}
		if d.Instructions != "" && msgs[0].Content == d.Instructions {
			msgs = msgs[1:]
		}
	}
	return append(msgs, more...), nil
}
