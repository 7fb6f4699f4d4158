package coordinator

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/toolfleet/toolfleet/internal/natsbus/stores"
	"github.com/toolfleet/toolfleet/pkg/logkey"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
	"github.com/toolfleet/toolfleet/pkg/runner"
)

// ErrNoJournal is returned by Resume for a run without a journal, or one
// that was not started by RunJournaled or Serve: runner.ErrNoJournal.
var ErrNoJournal = runner.ErrNoJournal

// Journaling reports whether Run journals: with a NATS server of its own
// (not the embedded one, whose store goes with the process).
func (c *Coordinator) Journaling() bool { return c.server == nil }

// RunJournaled runs prompt as a durable run: journaled in the journal
// stream under a new run id (logged as "run journaled"), so that
// "coordinator resume RUN" can continue it if this process is killed.
func (c *Coordinator) RunJournaled(ctx context.Context, prompt string) (*loop.Result, error) {
	run := protocol.NewRunID()
	c.log.Info().Str(logkey.RunID, string(run)).Str("resume", "coordinator resume "+string(run)).Msg("run journaled")
	return c.runner.RunDurable(ctx, run, prompt)
}

// Resume continues run from its journal: a run of RunJournaled whose
// process stopped. Journaled model responses are not asked again and
// answered calls are not run again; a finished run gives its result again.
func (c *Coordinator) Resume(ctx context.Context, run protocol.RunID) (*loop.Result, error) {
	res, err := c.runner.Resume(ctx, run)
	if errors.Is(err, runner.ErrNoJournal) {
		return nil, fmt.Errorf("%w (runs of \"coordinator serve\" are resumed by the serving coordinators)", err)
	}
	return res, err
}

// owner names this process as a journal's owner.
func owner() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("run@%s-%d", host, os.Getpid())
}

// JournalStreamConfig is the stream of run journals, one subject per run
// (<prefix>.journal.run.<run>) plus operators' cancel requests
// (<prefix>.journal.cancel.<run>), as natsbus.FleetStreams lists it. It
// is [stores.JournalStreamConfig].
var JournalStreamConfig = stores.JournalStreamConfig
