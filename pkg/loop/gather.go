package loop

import (
	"bytes"
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// Cancel reasons sent to workers.
const (
	cancelTimeout   = "timeout"
	cancelUnknown   = "outcome_unknown"
	cancelRun       = "run_cancelled"
	cancelUnpublish = "publish_interrupted"
)

// errBatchShort answers a call a [BatchDispatcher] returned no error for.
var errBatchShort = errors.New("loop: the dispatcher answered fewer calls than it was given")

// publishResult is one Publish's answer.
type publishResult struct {
	i   int
	err error
}

// dispatch publishes every call still open (valid, and approved where
// needed), concurrently, then gathers their results. It answers every call
// it was given.
func (ru *run) dispatch(ctx context.Context, round int, slots []callState) {
	var todo []int
	for i := range slots {
		if !slots[i].done {
			todo = append(todo, i)
		}
	}
	if len(todo) == 0 {
		return
	}
	if ctx.Err() != nil {
		for _, i := range todo {
			ru.answer(&slots[i], protocol.OutcomeCancelled, obsCancelled(slots[i].name))
		}
		return
	}
	if ru.inbox == nil {
		inbox, err := ru.r.disp.Open(ru.progressContext(ctx), ru.id)
		if err != nil || inbox == nil {
			ru.log.Warn().Str(logKeyEvent, evDispatchFailed).Str(logKeyDropReason, "open_failed").
				Str(logKeyErrorType, errType(err)).Int(logKeyRound, round).Send()
			for _, i := range todo {
				ru.failDispatch(ctx, &slots[i])
			}
			return
		}
		ru.inbox = inbox
	}

	// A durable run journals the calls (keys, deadlines) before the first
	// publish; a resumed one takes them from the journal, and publishes
	// again (deduplicated by call key) only when the round did not journal
	// that every publish returned.
	var journaled map[protocol.CallKey]JournaledCall
	published, resumed := false, false
	if ru.j != nil {
		if calls, ok := ru.j.rp.dispatched[round]; ok {
			resumed, published = true, ru.j.rp.published[round]
			journaled = make(map[protocol.CallKey]JournaledCall, len(calls))
			for _, c := range calls {
				journaled[c.CallKey] = c
			}
		}
	}
	for _, i := range todo {
		s := &slots[i]
		if c, ok := journaled[s.key]; ok {
			s.timeout = time.Duration(c.TimeoutMS) * time.Millisecond
			s.deadline = protocol.CallDeadline{At: c.Deadline, Grace: ru.cfg.Grace}
			// Its progress notice went to the previous owner: a
			// non-idempotent call may have started.
			s.started = !s.entry.spec.Idempotent
			continue
		}
		s.timeout = protocol.CallTimeout(&s.entry.spec, ru.cfg.ToolTimeout)
		s.deadline = protocol.NewCallDeadline(ru.now(), s.timeout, ru.cfg.Grace)
	}
	if !resumed && !ru.appendEntry(ctx, JournalEntry{Kind: EntryDispatched, Round: round, Calls: dispatchedCalls(slots, todo)}) {
		return
	}

	if resumed {
		// The round's calls, as journaled, are the only ones a result
		// read before they are reached is kept for, and the inbox takes
		// each only from its own tool.
		ru.resumedCalls = journaled
		defer func() { ru.resumedCalls = nil }()
		if ex, ok := ru.inbox.(ExpectInbox); ok {
			for _, c := range journaled {
				ex.Expect(c.CallKey, protocol.ToolName(c.Tool))
			}
		}
	}
	if resumed && !published {
		// Some calls may have been published and answered before the
		// crash: their results are read first and they are not published
		// again.
		ru.catchUp(ctx)
		ru.drainEarly(round)
	}

	ch := make(chan publishResult, len(todo))
	open := make(map[int]bool, len(todo))
	pending := make(map[protocol.CallKey]*callState, len(todo))
	var last time.Time
	for _, i := range todo {
		last = maxTime(last, slots[i].deadline.ResultBy())
	}
	// A round of more than one call goes out as one batch when the
	// dispatcher can.
	batcher, _ := ru.r.disp.(BatchDispatcher)
	if len(todo) < 2 {
		batcher = nil
	}
	var batch []Outgoing
	var batchSlots []int
	for _, i := range todo {
		s := &slots[i]
		ru.keys[s.key] = keyOpen
		if _, answered := ru.early[s.key]; published || answered || ru.pastDedup(journaled, s) {
			pending[s.key] = s
			continue
		}
		call := protocol.Call{
			V: protocol.Version, RunID: ru.id, Round: round, CallKey: s.key, CallID: protocol.CallID(s.id),
			Tool: s.entry.spec.Name, Arguments: bytes.Clone(s.args), Attempt: 1,
			MaxOutputChars:   ru.cfg.MaxObservationChars,
			RequiresApproval: s.approval, Approval: s.proof,
		}
		call.SetCallDeadline(s.deadline)
		open[i] = true
		ru.callEvent(round, s, CallQueued)
		ru.trackProgress(s)
		if batcher != nil {
			batch = append(batch, ru.outgoing(ctx, s, call))
			batchSlots = append(batchSlots, i)
			continue
		}
		go func() {
			pctx, cancel := context.WithDeadline(ru.spanContext(ctx, s), call.Deadline)
			defer cancel()
			ch <- publishResult{i: i, err: ru.r.disp.Publish(pctx, ru.outgoing(ctx, s, call))}
		}()
	}
	if len(batch) > 0 {
		// One goroutine for the round: the dispatcher writes every call
		// and then waits for their acknowledgements together.
		go func() {
			bctx, cancel := context.WithDeadline(ctx, last)
			defer cancel()
			errs := batcher.PublishBatch(bctx, batch)
			for k, i := range batchSlots {
				var err error
				if k < len(errs) {
					err = errs[k]
				} else {
					err = errBatchShort
				}
				ch <- publishResult{i: i, err: err}
			}
		}()
	}

	// Wait for every Publish, but never past the last deadline plus grace:
	// a Publish that has not returned by then is treated as published (its
	// result, if any, is still gathered) and answered timeout.
	backstop := time.NewTimer(last.Sub(ru.now()))
	defer backstop.Stop()
	interrupted := false
wait:
	for len(open) > 0 {
		select {
		case p := <-ch:
			delete(open, p.i)
			s := &slots[p.i]
			if p.err != nil {
				ru.log.Warn().Str(logKeyEvent, evDispatchFailed).Str(logKeyDropReason, "publish_failed").
					Str(logKeyCallKey, string(s.key)).Str(logKeyErrorType, errType(p.err)).Int(logKeyRound, round).Send()
				ru.failDispatch(ctx, s)
				continue
			}
			pending[s.key] = s
		case <-backstop.C:
			interrupted = true
			break wait
		case <-ctx.Done():
			interrupted = true
			break wait
		case <-ru.handoffC():
			ru.stopped()
			return
		}
	}
	for i := range open {
		pending[slots[i].key] = &slots[i]
	}
	// That every publish returned is stored while the results are
	// gathered: nothing waits on it but the round's next effect (a
	// withdrawal, a cancel, the observations), which waits for it first.
	if !published && !interrupted && !ru.appendEntryAsync(ctx, JournalEntry{Kind: EntryPublished, Round: round}) {
		return
	}
	if resumed {
		ru.catchUp(ctx)
	}
	ru.gather(ctx, round, pending)
	ru.flushJournal(ctx)
}

// outgoing is call, the publish of s, with its facts: at most once when
// the catalog says the call's tool is not idempotent.
func (ru *run) outgoing(ctx context.Context, s *callState, call protocol.Call) Outgoing {
	return Outgoing{Call: call, AtMostOnce: !s.entry.spec.Idempotent, StartedNotices: ru.startedNotices,
		Trace: trace.SpanContextFromContext(ru.spanContext(ctx, s))}
}

// resumedCall reports whether key is a call of the round being resumed,
// as the journal has it.
func (ru *run) resumedCall(key protocol.CallKey) bool {
	_, ok := ru.resumedCalls[key]
	return ok
}

// resumedTool reports whether a result that came on tool's subject ("":
// not known) may answer the resumed call key.
func (ru *run) resumedTool(key protocol.CallKey, tool protocol.ToolName) bool {
	return tool == "" || string(tool) == ru.resumedCalls[key].Tool
}

// maxEarlyResults bounds the results a durable run keeps for calls it has
// not reached yet.
const maxEarlyResults = 1024

// catchUpWait bounds the wait of a resumed round for the results stored
// before its inbox opened.
const catchUpWait = 30 * time.Second

// CatchUpInbox is an [Inbox] that can say when it has delivered every event
// stored before it was opened. A resumed round waits for it before it
// answers any call timeout, so a result stored while no coordinator owned
// the run is found, whatever the clock says.
type CatchUpInbox interface {
	Inbox
	CaughtUp() <-chan struct{}
}

// drainEarly takes what the inbox already holds, keeping results for
// calls not yet pending (ru.early).
func (ru *run) drainEarly(round int) {
	if ru.inbox == nil {
		return
	}
	drops := 0
	none := map[protocol.CallKey]*callState{}
	for {
		select {
		case ev, ok := <-ru.inbox.Events():
			if !ok {
				return
			}
			ru.handle(round, ev, none, &drops)
		default:
			return
		}
	}
}

// catchUp waits until the inbox delivered its backlog (bounded), unless it
// cannot tell.
func (ru *run) catchUp(ctx context.Context) {
	in, ok := ru.inbox.(CatchUpInbox)
	if !ok {
		return
	}
	t := time.NewTimer(catchUpWait)
	defer t.Stop()
	select {
	case <-in.CaughtUp():
	case <-ctx.Done():
	case <-ru.handoffC():
	case <-t.C:
		ru.log.Warn().Str(logKeyEvent, evCatchUpSlow).Send()
	}
}

// failDispatch answers a call whose Publish failed. If the run was being
// cancelled the call may have gone out, so a Cancel follows it.
func (ru *run) failDispatch(ctx context.Context, s *callState) {
	if ctx.Err() != nil {
		s.cancelWhy = cancelUnpublish
		ru.closeKey(s.key, keyBySynth)
		ru.answer(s, protocol.OutcomeCancelled, obsCancelled(s.name))
		return
	}
	ru.closeKey(s.key, keyBySynth)
	s.errorType = "dispatch"
	ru.answer(s, protocol.OutcomeFailed, obsDispatchFailed(s.name))
}

func (ru *run) closeKey(key protocol.CallKey, st keyState) {
	if _, ok := ru.keys[key]; ok {
		ru.keys[key] = st
	}
}

// gather reads the inbox until every pending call is answered, its deadline
// plus grace has passed (timeout, or outcome_unknown for a started
// non-idempotent call), or ctx ends (cancelled).
func (ru *run) gather(ctx context.Context, round int, pending map[protocol.CallKey]*callState) {
	var events <-chan Event
	if ru.inbox != nil {
		events = ru.inbox.Events()
	}
	drops := 0
	for key, s := range pending {
		if res, ok := ru.early[key]; ok {
			delete(ru.early, key)
			delete(pending, key)
			ru.keys[key] = keyByResult
			ru.fromResult(s, res)
		}
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
		now := ru.now()
		if withdrawer != nil {
			ru.withdrawDue(ctx, round, withdrawer, now, pending)
			if ru.stopped() {
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
		case <-ru.handoffC():
			ru.stopped()
			return
		case <-ru.journalSettled():
			// An owner fenced meanwhile stops as soon as it is told.
			if !ru.flushJournal(ctx) {
				return
			}
		case <-ctx.Done():
			for key, s := range pending {
				s.cancelWhy = cancelRun
				ru.closeKey(key, keyBySynth)
				ru.answer(s, protocol.OutcomeCancelled, obsCancelled(s.name))
				delete(pending, key)
			}
		case ev, ok := <-events:
			if !ok {
				events = nil // the inbox closed: wait out the deadlines
				continue
			}
			ru.handle(round, ev, pending, &drops)
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
func withdrawable(s *callState) bool {
	return !s.entry.spec.Idempotent && !s.started && !s.asked
}

// withdrawDue asks the inbox to take back each withdrawable pending call
// whose deadline has passed. One withdrawn never runs: it is answered
// timeout now, the model told it did not run, and leaves pending.
// Otherwise a worker claimed it, or the inbox cannot tell: it may have
// started, and it is awaited until its deadline plus grace
// (outcome_unknown then).
func (ru *run) withdrawDue(ctx context.Context, round int, in WithdrawInbox, now time.Time, pending map[protocol.CallKey]*callState) {
	var wctx context.Context
	for key, s := range pending {
		if !withdrawable(s) || now.Before(s.deadline.At) {
			continue
		}
		if wctx == nil {
			// A fenced owner withdraws nothing: what it journaled is
			// stored before its first withdrawal.
			if !ru.flushJournal(ctx) {
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
		ru.closeKey(key, keyBySynth)
		ru.answer(s, protocol.OutcomeTimeout, obsWithdrawn(s.name, s.timeout))
		delete(pending, key)
	}
}

// expire answers a call whose deadline and grace passed without a result.
func (ru *run) expire(s *callState) {
	ru.closeKey(s.key, keyBySynth)
	if s.started && !s.entry.spec.Idempotent {
		s.cancelWhy = cancelUnknown
		ru.answer(s, protocol.OutcomeUnknown, obsOutcomeUnknown(s.name))
		return
	}
	s.cancelWhy = cancelTimeout
	ru.answer(s, protocol.OutcomeTimeout, obsTimeout(s.name, s.timeout))
}

// workerOutcome reports whether a worker may report o; the other outcomes
// are the coordinator's own.
func workerOutcome(o protocol.Outcome) bool {
	switch o {
	case protocol.OutcomeOK, protocol.OutcomeFailed, protocol.OutcomeInvalidArguments,
		protocol.OutcomeUnknownTool, protocol.OutcomeTimeout, protocol.OutcomeCancelled,
		protocol.OutcomeDenied, protocol.OutcomeRateLimited:
		return true
	}
	return false
}

// handle applies one inbox event. Anything that does not answer an open
// call of this run is dropped and logged with ids only.
func (ru *run) handle(round int, ev Event, pending map[protocol.CallKey]*callState, drops *int) {
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
		case !workerOutcome(res.Outcome):
			drop(res.CallKey, dropInvalidOutcome)
		default:
			s := pending[res.CallKey]
			if s != nil && ev.Tool != "" && ev.Tool != s.entry.spec.Name {
				// Another tool's worker (or a forger) answering this call.
				drop(res.CallKey, dropToolMismatch)
				return
			}
			if s == nil {
				_, early := ru.early[res.CallKey]
				switch st, known := ru.keys[res.CallKey]; {
				case !known && early:
					// The first stored is taken, as the first to arrive
					// is for a pending call.
					drop(res.CallKey, dropDuplicate)
				case !known && ru.resumedCall(res.CallKey) && !ru.resumedTool(res.CallKey, ev.Tool):
					drop(res.CallKey, dropToolMismatch)
				case !known && ru.resumedCall(res.CallKey) && len(ru.early) < maxEarlyResults:
					// A resumed round reads the results stored for its
					// calls before it reaches them. A result for any
					// other call nobody published is not kept: it
					// would answer that call without running it.
					ru.early[res.CallKey] = res
				case !known:
					drop(res.CallKey, dropUnknownKey)
				case st == keyByResult:
					drop(res.CallKey, dropDuplicate)
				default:
					drop(res.CallKey, dropLate)
				}
				return
			}
			delete(pending, res.CallKey)
			ru.keys[res.CallKey] = keyByResult
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
				first := !s.started
				s.started = true
				s.worker, s.attempt = clipName(p.Worker), p.Attempt
				if first {
					ru.callEvent(round, s, CallStartedPhase)
				}
				ru.log.Debug().Str(logKeyEvent, evProgress).Int(logKeyRound, round).
					Str(logKeyCallKey, string(p.CallKey)).Str(logKeyWorker, s.worker).Send()
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

// fromResult answers a call from its worker's result (docs/design.md §4, step 7).
func (ru *run) fromResult(s *callState, res protocol.Result) {
	if res.Worker != "" {
		s.worker = clipName(res.Worker)
	}
	if res.Attempt != 0 {
		s.attempt = res.Attempt
	}
	switch res.Outcome {
	case protocol.OutcomeOK:
		s.truncated = res.Truncated
		ru.answer(s, protocol.OutcomeOK, res.Output)
	case protocol.OutcomeFailed:
		s.errorType = cleanErrorType(res.ErrorType)
		ru.answer(s, protocol.OutcomeFailed, obsFailed(s.name, res.ErrorType))
	case protocol.OutcomeInvalidArguments:
		ru.answer(s, protocol.OutcomeInvalidArguments, obsArgumentError(s.name, res.Output))
	case protocol.OutcomeUnknownTool:
		ru.answer(s, protocol.OutcomeUnknownTool, obsUnknownTool(s.name))
	case protocol.OutcomeTimeout:
		ru.answer(s, protocol.OutcomeTimeout, obsTimeout(s.name, s.timeout))
	case protocol.OutcomeDenied:
		s.gateResult = "worker_refused"
		ru.answer(s, protocol.OutcomeDenied, obsWorkerRefused(s.name))
	case protocol.OutcomeRateLimited:
		ru.answer(s, protocol.OutcomeRateLimited, obsRateLimited(s.name, time.Duration(res.RetryAfterMS)*time.Millisecond))
	default: // protocol.OutcomeCancelled
		ru.answer(s, protocol.OutcomeCancelled, obsCancelled(s.name))
	}
}

// publishCancels asks workers to stop every call the round gave up on,
// concurrently, with a context that outlives the run's own but is bounded
// by CancelTimeout.
func (ru *run) publishCancels(ctx context.Context, slots []callState) {
	var list []*callState
	for i := range slots {
		if slots[i].cancelWhy != "" {
			list = append(list, &slots[i])
		}
	}
	if len(list) == 0 {
		return
	}
	if ru.j != nil && ru.j.held != nil {
		// Unreachable (a cancel follows a publish, which follows an
		// append); an entry held back is stored before any effect.
		ru.storeHeld(ctx)
		if ru.stopped() {
			return
		}
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

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// pastDedup reports whether s is a non-idempotent call of a resumed round
// first dispatched longer ago than Config.DedupWindow: publishing it again
// would store a new call, which a worker could run a second time, so it is
// awaited where it is (outcome_unknown at its deadline) instead.
func (ru *run) pastDedup(journaled map[protocol.CallKey]JournaledCall, s *callState) bool {
	c, ok := journaled[s.key]
	if !ok || s.entry.spec.Idempotent {
		return false
	}
	dispatched := c.Deadline.Add(-time.Duration(c.TimeoutMS) * time.Millisecond)
	return ru.now().Sub(dispatched) >= ru.cfg.DedupWindow
}
