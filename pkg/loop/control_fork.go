package loop

import (
	"context"
	"errors"
	"fmt"
)

// ErrForkRound is wrapped by the error of [ForkMessages] for a round the
// run did not reach.
var ErrForkRound = errors.New("loop: no such round to fork at")

// ForkMessages returns the transcript a fork of an ended (or parked: up to
// the round it parked in) run at round at starts from: the run's journaled input, then its rounds before at — the
// model's responses as journaled, each call answered as the journal says.
// Nothing is asked, published or run to make it. A run of it
// ([Runner.RunMessages], a submission's messages) asks its model from
// round at on; its calls are its own, with new keys, and its
// [Result].SideEffects name only them.
func ForkMessages(ctx context.Context, entries []JournalEntry, at int) ([]Message, error) {
	rec, err := recordedRun(entries)
	if err == nil {
		err = rec.inputErr
	}
	if err != nil {
		return nil, err
	}
	// A parked run is forked at the round whose model failed, too: a new
	// run that goes on from there (with another model, say).
	last := max(rec.rounds, rec.parked)
	if at < 1 || at > last {
		return nil, fmt.Errorf("%w: round %d, the run has rounds 1 to %d", ErrForkRound, at, last)
	}
	if at == 1 {
		return cloneMessages(rec.input), nil
	}
	rp := newReplayer(rec)
	res, err := rp.run(ctx, Config{}, &journalModel{rec: rec}, rec.input, at-1)
	if err != nil {
		return nil, err
	}
	if res.TerminationReason != TerminationMaxRounds || res.Metadata.Rounds != at-1 {
		return nil, fmt.Errorf("%w: the journal's rounds before %d do not replay (%s after %d rounds)", ErrForkRound, at, res.TerminationReason, res.Metadata.Rounds)
	}
	return res.Messages, nil
}

// journalModel answers each round with the recorded run's response, in
// order: one run at a time.
type journalModel struct {
	rec   *recorded
	round int
}

func (m *journalModel) Complete(_ context.Context, _ Request) (*Response, error) {
	m.round++
	jr := m.rec.rp.model[m.round]
	if jr == nil {
		return nil, fmt.Errorf("%w: round %d has no journaled response", ErrForkRound, m.round)
	}
	msg := jr.Message
	msg.ToolCalls = cloneToolCalls(msg.ToolCalls)
	return &Response{Message: msg, Usage: jr.Usage, FinishReason: jr.FinishReason}, nil
}
