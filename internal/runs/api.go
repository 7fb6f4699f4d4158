package runs

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// ErrNoJournal is returned by [Get] for a run without a journal: unknown,
// or expired from the journal stream.
var ErrNoJournal = errors.New("runs: the run has no journal")

// Get reads one run's state from its journal.
func Get(ctx context.Context, js natsbus.JetStream, subjects protocol.Subjects, run protocol.RunID) (State, error) {
	st, err := state(ctx, js, subjects, run)
	if err != nil {
		return State{}, err
	}
	if st.Entries == 0 {
		return State{}, fmt.Errorf("run %s: %w", run, ErrNoJournal)
	}
	return st, nil
}

// List reads the state of every run with a journal, by run id.
func List(ctx context.Context, js natsbus.JetStream, subjects protocol.Subjects) ([]State, error) {
	counts, err := natsbus.ListJournals(ctx, js, subjects)
	if err != nil {
		return nil, err
	}
	ids := make([]protocol.RunID, 0, len(counts))
	for id := range counts {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	states := make([]State, 0, len(ids))
	for _, id := range ids {
		st, err := state(ctx, js, subjects, id)
		if err != nil {
			return nil, err
		}
		states = append(states, st)
	}
	return states, nil
}

// Cancel stores a request to cancel run, by by and for reason: the
// coordinator running it cancels it, and one that takes it later does too.
func Cancel(ctx context.Context, js natsbus.JetStream, subjects protocol.Subjects, run protocol.RunID, by, reason string) error {
	return natsbus.RequestCancel(ctx, js, subjects, run, protocol.RunCancelRequest{By: by, Reason: reason, At: time.Now().UTC()})
}
