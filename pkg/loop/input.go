package loop

import (
	"context"

	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// InputMode says when a run's new input takes effect.
type InputMode string

// The modes of [Input].
const (
	// InputEnqueue: the message is added to the transcript before the
	// run's next model step; the round in flight goes on as it would.
	InputEnqueue InputMode = protocol.RunInputEnqueue
	// InputInterrupt: the round in flight stops waiting for what has not
	// started. Each of its calls not yet published, and each
	// non-idempotent one withdrawn before any worker claimed it, is
	// answered interrupted and never runs; any other call keeps its rule
	// (its result; timeout, or outcome_unknown for a non-idempotent one a
	// worker started). Then the message is added, and the model asked.
	InputInterrupt InputMode = protocol.RunInputInterrupt
)

// Valid reports whether m is one of the input modes.
func (m InputMode) Valid() bool { return m == InputEnqueue || m == InputInterrupt }

// Input is a user message added to a run in flight ([Durable.Input]).
type Input struct {
	Mode    InputMode `json:"mode"`
	Content string    `json:"content"`
}

// takeInputs adds to the transcript, as user messages, the inputs that
// follow round: those journaled before the run was resumed, those taken
// while the round gathered, and those waiting on the run's input channel
// now (each journaled before it takes effect); a replay or a fork puts
// back those of the recorded run. false: the run must stop.
func (ru *run) takeInputs(ctx context.Context, round int) bool {
	for _, in := range append(ru.j.replay().inputs(round), ru.given.inputs(round)...) {
		ru.msgs = append(ru.msgs, Message{Role: "user", Content: in.Content})
	}
	for _, in := range ru.taken {
		ru.msgs = append(ru.msgs, Message{Role: "user", Content: in.Content})
	}
	ru.taken = ru.taken[:0]
	for {
		select {
		case in, ok := <-ru.input:
			if !ok {
				ru.input = nil
				return true
			}
			if !ru.journalInput(ctx, round, in) {
				return false
			}
			ru.msgs = append(ru.msgs, Message{Role: "user", Content: in.Content})
		default:
			return true
		}
	}
}

// journalInput journals in as following round, before it takes effect.
func (ru *run) journalInput(ctx context.Context, round int, in Input) bool {
	ru.log.Info().Str(logKeyEvent, evRunInput).Int(logKeyRound, round).Str(logKeyDropReason, string(in.Mode)).Send()
	return ru.j.append(ctx, JournalEntry{Kind: EntryInput, Round: round, Input: &in})
}

// takeInput handles an input that came while round was in flight: it is
// journaled and kept for the round's end; an interrupt also withdraws the
// round's calls not started. false: the run must stop.
func (ru *run) takeInput(ctx context.Context, round int, in Input, pending map[protocol.CallKey]*roundCall) bool {
	if !ru.journalInput(ctx, round, in) {
		return false
	}
	ru.taken = append(ru.taken, in)
	if in.Mode == InputInterrupt {
		ru.interrupted = true
		ru.interrupt(ctx, round, pending)
	}
	return true
}

// pollInterrupt takes, before round's calls are published, the inputs
// waiting on the run's input channel, and reports whether one of them
// interrupts the round. false ok: the run must stop.
func (ru *run) pollInterrupt(ctx context.Context, round int) (interrupted, ok bool) {
	for {
		select {
		case in, open := <-ru.input:
			if !open {
				ru.input = nil
				return ru.interrupted, true
			}
			if !ru.takeInput(ctx, round, in, nil) {
				return false, false
			}
		default:
			return ru.interrupted, true
		}
	}
}

// interruptUnpublished answers interrupted every call of the round not
// answered yet: none of them was published.
func (ru *run) interruptUnpublished(calls []roundCall) {
	for i := range calls {
		if !calls[i].done {
			ru.answer(&calls[i], protocol.OutcomeInterrupted, obsInterrupted(calls[i].name))
		}
	}
}

// interrupt asks the inbox to take back every pending non-idempotent call
// no worker is known to have claimed or started (withdrawable, as at its
// deadline): one withdrawn never runs and is answered interrupted now; any
// other is awaited under its rule. An idempotent call is awaited too: the
// fleet cannot promise it never runs, and its result is safe to use.
// Without a [WithdrawInbox] every pending call is awaited.
func (ru *run) interrupt(ctx context.Context, round int, pending map[protocol.CallKey]*roundCall) {
	in, _ := ru.inbox.(WithdrawInbox)
	if in == nil || len(pending) == 0 || !ru.j.flush(ctx) {
		return
	}
	wctx, cancel := context.WithTimeout(ctx, withdrawWait)
	defer cancel()
	for key, s := range pending {
		if !withdrawable(s) {
			continue
		}
		s.asked = true
		withdrawn, err := in.Withdraw(wctx, key)
		if err != nil || !withdrawn {
			s.started = true
			continue
		}
		ru.log.Debug().Str(logKeyEvent, evWithdrawn).Int(logKeyRound, round).Str(logKeyCallKey, string(key)).Send()
		ru.closeKey(key, keyBySynth)
		ru.answer(s, protocol.OutcomeInterrupted, obsInterrupted(s.name))
		delete(pending, key)
	}
}
