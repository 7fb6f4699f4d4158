package runs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natsbus/stores"
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
	counts, err := stores.ListJournals(ctx, js, subjects)
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
	return stores.RequestCancel(ctx, js, subjects, run, protocol.RunCancelRequest{By: by, Reason: reason, At: time.Now().UTC()})
}

// resultKey is run's key in the runs bucket: <client>.<run> for a served
// run, whose journal's request entry names the client, else the run id.
func resultKey(run protocol.RunID, recs []stores.JournalRecord) string {
	for _, r := range recs {
		if r.Entry.Kind != stores.EntryRequest {
			continue
		}
		var req struct {
			Client string `json:"client"`
		}
		if json.Unmarshal(r.Entry.Data, &req) == nil && protocol.ValidToken(req.Client) {
			return protocol.RunKey(req.Client, run)
		}
		break
	}
	return string(run)
}

// state reads one run's state.
func state(ctx context.Context, js natsbus.JetStream, subjects protocol.Subjects, run protocol.RunID) (State, error) {
	recs, err := stores.ReadJournal(ctx, js, subjects, run)
	if err != nil {
		return State{}, err
	}
	st := Summarize(run, recs)
	if results, err := stores.OpenRunResults(ctx, js, subjects); err == nil {
		st.HasResult = results.Has(ctx, resultKey(run, recs))
	}
	if st.Status == StatusRunning {
		if ok, _ := stores.CancelRequested(ctx, js, subjects, run); ok {
			st.Status = StatusCancelRequested
		}
	}
	return st, nil
}
