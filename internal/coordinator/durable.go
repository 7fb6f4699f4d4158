package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// journaledInput is the request entry of a run started by RunJournaled:
// what Resume needs to continue it.
type journaledInput struct {
	Prompt string `json:"prompt"`
}

// ErrNoJournal is returned by Resume for a run without a journal, or one
// that was not started by RunJournaled or Serve.
var ErrNoJournal = errors.New("coordinator: the run has no journal to resume from")

// Journaling reports whether Run journals: with a NATS server of its own
// (not the embedded one, whose store goes with the process).
func (c *Coordinator) Journaling() bool { return c.server == nil }

// RunJournaled runs prompt as a durable run: journaled in the journal
// stream under a new run id (logged as "run journaled"), so that
// "coordinator resume RUN" can continue it if this process is killed.
func (c *Coordinator) RunJournaled(ctx context.Context, prompt string) (*loop.Result, error) {
	run := protocol.NewRunID()
	j, err := natsbus.OpenJournal(ctx, c.js, c.subjects, run, c.owner(), "start")
	if err != nil {
		return nil, fmt.Errorf("coordinator: %w", err)
	}
	data, err := json.Marshal(journaledInput{Prompt: prompt})
	if err != nil {
		return nil, err
	}
	if err := j.Append(ctx, loop.JournalEntry{Kind: natsbus.EntryRequest, Data: data}); err != nil {
		return nil, fmt.Errorf("coordinator: %w", err)
	}
	c.log.Info().Str(logRun, string(run)).Str("resume", "coordinator resume "+string(run)).Msg("run journaled")
	return c.runner.RunDurable(ctx, loop.Durable{Prompt: prompt, Messages: c.agentMessages(prompt), RunID: run, Journal: j})
}

// Resume continues run from its journal: a run of RunJournaled whose
// process stopped. Journaled model responses are not asked again and
// answered calls are not run again; a finished run gives its result again.
func (c *Coordinator) Resume(ctx context.Context, run protocol.RunID) (*loop.Result, error) {
	if !run.Valid() {
		return nil, fmt.Errorf("coordinator: %q is not a run id", run)
	}
	j, err := natsbus.OpenJournal(ctx, c.js, c.subjects, run, c.owner(), "resume")
	if err != nil {
		return nil, fmt.Errorf("coordinator: %w", err)
	}
	var in *journaledInput
	for _, e := range j.Entries() {
		if e.Kind == natsbus.EntryRequest {
			var v journaledInput
			if json.Unmarshal(e.Data, &v) == nil && v.Prompt != "" {
				in = &v
			}
		}
	}
	if in == nil {
		return nil, fmt.Errorf("%w: %s (runs of \"coordinator serve\" are resumed by the serving coordinators)", ErrNoJournal, run)
	}
	c.log.Info().Str(logRun, string(run)).Int("journal_entries", len(j.Entries())).Msg("resuming the run from its journal")
	return c.runner.RunDurable(ctx, loop.Durable{Prompt: in.Prompt, Messages: c.agentMessages(in.Prompt), RunID: run, Journal: j})
}

// owner names this process as a journal's owner.
func (c *Coordinator) owner() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("run@%s-%d", host, os.Getpid())
}
