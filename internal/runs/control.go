package runs

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/toolfleet/toolfleet/internal/agents"
	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/pkg/agent"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// ModelFunc makes the model of a replay's --model SPEC (the specs of
// "coordinator run --model").
type ModelFunc func(spec string) (loop.Model, error)

// AgentModelFunc makes the model client of an agent's model
// (providers.Models.Model in the coordinator's binary).
type AgentModelFunc func(agent.Model) (loop.Model, error)

// maxFileBytes bounds an --instructions or --messages file.
const maxFileBytes = 1 << 20

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
	recs, err := natsbus.ReadJournal(ctx, js, subjects, run)
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
	store, err := natsbus.OpenAgents(ctx, js, subjects)
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

// readFile reads a file of at most maxFileBytes.
func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxFileBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxFileBytes {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, maxFileBytes)
	}
	return data, nil
}

// readMessages reads a JSON array of chat-completions messages.
func readMessages(path string) ([]loop.Message, error) {
	data, err := readFile(path)
	if err != nil {
		return nil, err
	}
	var msgs []loop.Message
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&msgs); err != nil || dec.More() {
		return nil, fmt.Errorf("%s: not a JSON array of {role, content, tool_calls, tool_call_id} messages", path)
	}
	return msgs, nil
}

// printReport writes a replay's report for a person.
func printReport(w io.Writer, run protocol.RunID, rep *loop.ReplayReport) {
	fmt.Fprintf(w, "run:        %s\n", run)
	fmt.Fprintf(w, "recorded:   %d rounds, %s, %d calls\n", rep.Recorded.Rounds, rep.Recorded.Termination, rep.Recorded.ToolCalls)
	fmt.Fprintf(w, "replayed:   %d rounds, %s, %d calls: %d answered from the journal, %d not_replayed; nothing ran\n",
		rep.Replayed.Rounds, rep.Replayed.Termination, rep.Replayed.ToolCalls, rep.ReplayedCalls, rep.NotReplayedCalls)
	if !rep.Diverged {
		fmt.Fprintln(w, "diverged:   no")
		return
	}
	if rep.FirstDivergingRound == 0 {
		fmt.Fprintln(w, "diverged:   yes, in how the run ended")
		return
	}
	fmt.Fprintf(w, "diverged:   yes, first in round %d\n", rep.FirstDivergingRound)
	call := func(d loop.CallDigest) string {
		return fmt.Sprintf("%s {%s} %s", d.Tool, strings.Join(d.ArgKeys, ", "), d.Digest)
	}
	for _, d := range rep.Rounds {
		fmt.Fprintf(w, "round %d:\n", d.Round)
		for _, c := range d.Changed {
			fmt.Fprintf(w, "  changed  %s -> {%s} %s\n", call(c.From), strings.Join(c.To.ArgKeys, ", "), c.To.Digest)
		}
		for _, c := range d.Added {
			fmt.Fprintf(w, "  added    %s\n", call(c))
		}
		for _, c := range d.Dropped {
			fmt.Fprintf(w, "  dropped  %s\n", call(c))
		}
		if d.AnswerChanged {
			fmt.Fprintln(w, "  answer   changed")
		}
	}
}

// writeFork writes a fork's transcript to path (stdout when empty) and
// says on stderr how to submit it.
func writeFork(stdout, stderr io.Writer, path string, run protocol.RunID, at int, msgs []loop.Message) error {
	data, err := json.MarshalIndent(msgs, "", "  ")
	if err != nil {
		return err
	}
	data = append(data, '\n')
	if path == "" {
		_, err = stdout.Write(data)
	} else {
		err = os.WriteFile(path, data, 0o600)
	}
	if err != nil {
		return err
	}
	file := path
	if file == "" {
		file = "FILE"
	}
	fmt.Fprintf(stderr, "fork of run %s at round %d: %d messages; submit it as the client: coordinator submit --messages %s\n", run, at, len(msgs), file)
	return nil
}
