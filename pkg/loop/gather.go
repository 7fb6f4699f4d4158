package loop

import (
	"context"
	"time"

	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// gather is a round's fourth phase (docs/design.md §4, step 6): it reads
// the inbox until every pending call is answered, its deadline plus grace
// has passed (timeout, or outcome_unknown for a started non-idempotent
// call), or ctx ends (cancelled).
func (ru *run) gather(ctx context.Context, round int, pending map[protocol.CallKey]*roundCall) {
	if len(pending) == 0 {
		return
	}
	var events <-chan Event
	if ru.inbox != nil {
		events = ru.inbox.Events()
	}
	drops := 0
	if len(ru.early) > 0 {
		ru.takeEarly(pending)
	}
	withdrawer, _ := ru.inbox.(WithdrawInbox)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for len(pending) > 0 {
		// Whatever already arrived counts before any deadline is judged.
	drain:
		for events != nil {
			select {
			case ev, ok := <-events:
				if !ok {
					events = nil
					break drain
				}
				ru.handle(round, ev, pending, &drops)
			default:
				break drain
			}
		}
		if len(pending) == 0 {
			break
		}
		now := ru.cfg.Now()
		if withdrawer != nil {
			ru.withdrawDue(ctx, round, withdrawer, now, pending)
			if ru.j.checkpoint() != nil {
				return
			}
		}
		var next time.Time
		for key, s := range pending {
			limit := s.deadline.ResultBy()
			if !now.Before(limit) {
				ru.expire(s)
				delete(pending, key)
				continue
			}
			if withdrawer != nil && withdrawable(s) {
				limit = s.deadline.At
			}
			if next.IsZero() || limit.Before(next) {
				next = limit
			}
		}
		if len(pending) == 0 {
			break
		}
		timer.Reset(next.Sub(now))
		select {
		case <-ru.handoff:
			_ = ru.j.checkpoint() // the run stops: it records ErrHandedOff
			return
		case <-ru.j.settled():
			// An owner fenced meanwhile stops as soon as it is told.
			if !ru.j.flush(ctx) {
				return
			}
		case <-ru.j.due():
			if !ru.j.appendDue(ctx) {
				return
			}
		case <-ctx.Done():
			for key, s := range pending {
				ru.answerRunCancelled(s)
				delete(pending, key)
			}
		case ev, ok := <-events:
			if !ok {
				events = nil // the inbox closed: wait out the deadlines
				continue
			}
			ru.handle(round, ev, pending, &drops)
		case in, ok := <-ru.input:
			if !ok {
				ru.input = nil
				continue
			}
			if !ru.takeInput(ctx, round, in, pending) {
				return
			}
		case <-timer.C:
		}
	}
	if drops > maxLoggedDropsPerRound {
		ru.log.Warn().Str(logKeyEvent, evDropsSuppress).Int(logKeyRound, round).
			Int(logKeyCount, drops-maxLoggedDropsPerRound).Send()
	}
}

// withdrawWait bounds the wait for the fleet's answers to the withdrawals
// of one pass over a round's pending calls.
const withdrawWait = 5 * time.Second

// withdrawable reports whether s is a call to withdraw at its deadline: a
// non-idempotent call not known to have started, not asked about yet.
func withdrawable(s *roundCall) bool {
	return !s.entry.spec.Idempotent && !s.started && !s.asked
}

// withdrawDue asks the inbox to take back each withdrawable pending call
// whose deadline has passed. One withdrawn never runs: it is answered
// timeout now, the model told it did not run, and leaves pending.
// Otherwise a worker claimed it, or the inbox cannot tell: it may have
// started, and it is awaited until its deadline plus grace
// (outcome_unknown then).
func (ru *run) withdrawDue(ctx context.Context, round int, in WithdrawInbox, now time.Time, pending map[protocol.CallKey]*roundCall) {
	var wctx context.Context
	for key, s := range pending {
		if !withdrawable(s) || now.Before(s.deadline.At) {
			continue
		}
		if wctx == nil {
			// A fenced owner withdraws nothing: what it journaled is
			// stored before its first withdrawal.
			if !ru.j.flush(ctx) {
				return
			}
			var cancel context.CancelFunc
			wctx, cancel = context.WithTimeout(ctx, withdrawWait)
			defer cancel()
		}
		s.asked = true
		withdrawn, err := in.Withdraw(wctx, key)
		if err != nil || !withdrawn {
			s.started = true
			ev := ru.log.Debug()
			if err != nil {
				ev = ru.log.Warn() // outcome_unknown where the fleet may say timeout
			}
			ev.Str(logKeyEvent, evClaimed).Int(logKeyRound, round).Str(logKeyCallKey, string(key)).
				Str(logKeyErrorType, errType(err)).Send()
			continue
		}
		ru.log.Debug().Str(logKeyEvent, evWithdrawn).Int(logKeyRound, round).Str(logKeyCallKey, string(key)).Send()
		ru.answerWithdrawn(s)
		delete(pending, key)
	}
}

// handle applies one inbox event. Anything that does not answer an open
// call of this run is dropped and logged with ids only.
func (ru *run) handle(round int, ev Event, pending map[protocol.CallKey]*roundCall, drops *int) {
	drop := func(key protocol.CallKey, why string) {
		*drops++
		if *drops <= maxLoggedDropsPerRound {
			ru.log.Warn().Str(logKeyEvent, evEventDropped).Int(logKeyRound, round).
				Str(logKeyCallKey, clipName(string(key))).Str(logKeyDropReason, why).Send()
		}
	}
	switch {
	case ev.Result != nil && ev.Started == nil:
		res := *ev.Result
		switch {
		case res.Validate() != nil:
			drop(res.CallKey, dropInvalid)
		case res.RunID != ru.id:
			drop(res.CallKey, dropOtherRun)
		case !res.Outcome.ByWorker():
			drop(res.CallKey, dropInvalidOutcome)
		default:
			s := pending[res.CallKey]
			if s != nil && ev.Tool != "" && ev.Tool != s.entry.spec.Name {
				// Another tool's worker (or a forger) answering this call.
				drop(res.CallKey, dropToolMismatch)
				return
			}
			if s == nil {
				switch st, known := ru.keys[res.CallKey]; {
				case !known:
					// Kept only for a call of a resumed round (replay.go).
					if why := ru.keepEarly(res, ev.Tool); why != "" {
						drop(res.CallKey, why)
					}
				case st == keyByResult:
					drop(res.CallKey, dropDuplicate)
				default:
					drop(res.CallKey, dropLate)
				}
				return
			}
			delete(pending, res.CallKey)
			ru.keys[res.CallKey] = keyByResult
			ru.startedFromResult(round, s, res)
			ru.fromResult(s, res)
		}
	case ev.Started != nil && ev.Result == nil:
		p := *ev.Started
		switch {
		case p.Validate() != nil:
			drop(p.CallKey, dropInvalid)
		case p.RunID != ru.id:
			drop(p.CallKey, dropOtherRun)
		default:
			if s := pending[p.CallKey]; s != nil {
				ru.callStartedOnWorker(round, s, p)
			} else if _, known := ru.keys[p.CallKey]; !known {
				drop(p.CallKey, dropUnknownKey)
			}
			// Progress for a call already answered is normal: it travels
			// apart from results and may arrive after them.
		}
	default:
		drop("", dropMalformed)
	}
}

// startedFromResult: a run that asked for started notices hears of a
// call's start from its result when the notice has not come first. The
// notice travels apart from results and may come after them (then it is
// dropped above); a worker that answered ok or failed ran the call.
func (ru *run) startedFromResult(round int, c *roundCall, res protocol.Result) {
	ran := res.Outcome == protocol.OutcomeOK || res.Outcome == protocol.OutcomeFailed
	if !ru.startedNotices || c.started || res.Worker == "" || !ran {
		return
	}
	ru.callStartedOnWorker(round, c, protocol.Started{V: res.V, RunID: res.RunID, CallKey: res.CallKey, Worker: res.Worker, Attempt: res.Attempt})
}

// publishCancels asks workers to stop every call the round gave up on,
// concurrently, with a context that outlives the run's own but is bounded
// by CancelTimeout.
func (ru *run) publishCancels(ctx context.Context, calls []roundCall) {
	var list []*roundCall
	for i := range calls {
		if calls[i].cancelWhy != "" {
			list = append(list, &calls[i])
		}
	}
	if len(list) == 0 {
		return
	}
	// An entry held back (a model response, when the inbox did not open)
	// is stored before any effect.
	if !ru.j.storeHeld(ctx) {
		return
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ru.cfg.CancelTimeout)
	defer cancel()
	type cancelResult struct {
		key protocol.CallKey
		err error
	}
	ch := make(chan cancelResult, len(list))
	for _, s := range list {
		c := protocol.Cancel{V: protocol.Version, RunID: ru.id, CallKey: s.key, Reason: s.cancelWhy}
		go func() { ch <- cancelResult{key: c.CallKey, err: ru.r.disp.Cancel(cctx, c)} }()
	}
	for range list {
		select {
		case r := <-ch:
			if r.err != nil {
				ru.log.Warn().Str(logKeyEvent, evCancelFailed).Str(logKeyCallKey, string(r.key)).
					Str(logKeyErrorType, errType(r.err)).Send()
			}
		case <-cctx.Done():
			ru.log.Warn().Str(logKeyEvent, evCancelFailed).Str(logKeyDropReason, "cancel_timeout").Send()
			return
		}
	}
}
