package loop

import (
	"context"
	"time"

	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// What a durable run replays: a round is journaled at named points (its
// approval requests and decisions, its dispatch, that every publish
// returned, its observations) and a resumed run takes each step from the
// journal instead of doing it again. The round calls these points through
// [runJournal]; a plain run's noJournal journals nothing and replays
// nothing. The functions here are a durable run's.

// replay indexes journaled entries by what they decide. A nil *replay (a
// plain run's) holds nothing.
type replay struct {
	tools      map[int][]protocol.ToolSpec
	model      map[int]*JournaledResponse
	approvals  map[int]JournalEntry
	decisions  map[protocol.CallKey]JournaledDecision
	dispatched map[int][]JournaledCall
	published  map[int]bool
	observed   map[int][]JournaledObservation
	finished   *JournalEntry
	// input holds the inputs journaled after each round, in order.
	input map[int][]Input
}

// inputs returns the inputs journaled to follow round; nil for a nil
// replay (a plain run).
func (rp *replay) inputs(round int) []Input {
	if rp == nil {
		return nil
	}
	return rp.input[round]
}

// requested reports whether the journal holds an approval request of
// key in round: such a call waits for its decision whoever resumes the
// run, whatever the resuming runner's own approvals say. False for a nil
// replay (a plain run).
func (rp *replay) requested(round int, key protocol.CallKey) bool {
	if rp == nil {
		return false
	}
	e, ok := rp.approvals[round]
	if !ok {
		return false
	}
	for _, c := range e.Calls {
		if c.CallKey == key {
			return true
		}
	}
	return false
}

func indexEntries(es []JournalEntry) *replay {
	rp := &replay{
		tools: map[int][]protocol.ToolSpec{}, model: map[int]*JournaledResponse{},
		approvals: map[int]JournalEntry{}, decisions: map[protocol.CallKey]JournaledDecision{},
		dispatched: map[int][]JournaledCall{}, published: map[int]bool{}, observed: map[int][]JournaledObservation{},
		input: map[int][]Input{},
	}
	for i := range es {
		e := es[i]
		switch e.Kind {
		case EntryTools:
			rp.tools[e.Round] = e.Tools
		case EntryModel:
			if e.Response != nil {
				rp.model[e.Round] = e.Response
			}
		case EntryApprovalRequested:
			rp.approvals[e.Round] = e
		case EntryApprovalDecided:
			if e.Decision != nil {
				rp.decisions[e.Decision.CallKey] = *e.Decision
			}
		case EntryDispatched:
			rp.dispatched[e.Round] = e.Calls
		case EntryPublished:
			rp.published[e.Round] = true
		case EntryObserved:
			rp.observed[e.Round] = e.Observations
		case EntryFinished:
			rp.finished = &e
		case EntryInput:
			if e.Input != nil {
				rp.input[e.Round] = append(rp.input[e.Round], *e.Input)
			}
		}
	}
	return rp
}

// journaledTools returns the tools round offered, as journaled: its own
// tools entry, or, for a round whose model response is journaled without
// one (it was offered what the round before was), the last tools entry
// before it.
func (rp *replay) journaledTools(round int) ([]protocol.ToolSpec, bool) {
	if rp == nil {
		return nil, false
	}
	if specs, ok := rp.tools[round]; ok {
		return specs, true
	}
	if rp.model[round] == nil {
		return nil, false
	}
	for r := round - 1; r >= 0; r-- {
		if specs, ok := rp.tools[r]; ok {
			return specs, true
		}
	}
	return nil, false
}

// response returns round's journaled model response, or nil.
func (rp *replay) response(round int) *JournaledResponse {
	if rp == nil {
		return nil
	}
	return rp.model[round]
}

// end returns the run's journaled end, or nil.
func (rp *replay) end() *JournalEntry {
	if rp == nil {
		return nil
	}
	return rp.finished
}

// replayObserved implements [runJournal].
func (js *journalState) replayObserved(round int, calls []roundCall) bool {
	ru := js.ru
	obs, ok := js.rp.observed[round]
	if !ok || len(obs) != len(calls) {
		return false
	}
	for i := range calls {
		c, o := &calls[i], obs[i]
		c.done, c.ans = true, o
		c.ans.CallKey, c.ans.DurationMS = "", 0
		c.end = c.start.Add(time.Duration(o.DurationMS) * time.Millisecond)
		if c.key != "" {
			ru.keys[c.key] = keyByResult
		}
	}
	return true
}

// approvalsRequested implements [runJournal].
func (js *journalState) approvalsRequested(ctx context.Context, round int, calls []roundCall, waiting []int, deadline time.Time) (time.Time, []int, bool) {
	ru, rp := js.ru, js.rp
	if e, ok := rp.approvals[round]; ok {
		var still []int
		for _, i := range waiting {
			c := &calls[i]
			d, ok := rp.decisions[c.key]
			if !ok {
				still = append(still, i)
				continue
			}
			c.ans.GateResult, c.proof = d.GateResult, d.Proof
			if d.Outcome != "" {
				ru.answer(c, d.Outcome, d.Content)
			}
		}
		return e.Deadline, still, true
	}
	jc := make([]JournaledCall, 0, len(waiting))
	for _, i := range waiting {
		jc = append(jc, JournaledCall{CallKey: calls[i].key, Tool: calls[i].name})
	}
	return deadline, waiting, js.append(ctx, JournalEntry{Kind: EntryApprovalRequested, Round: round, Deadline: deadline, Calls: jc})
}

// approvalDecided implements [runJournal].
func (js *journalState) approvalDecided(ctx context.Context, c *roundCall) bool {
	d := JournaledDecision{CallKey: c.key, GateResult: c.ans.GateResult, Proof: c.proof}
	if c.done {
		d.Outcome, d.Content = c.ans.Outcome, c.ans.Content
	}
	return js.append(ctx, JournalEntry{Kind: EntryApprovalDecided, Decision: &d})
}

// resumedRound is a round a resumed run dispatched before: its calls as
// journaled, and whether every publish of it returned.
type resumedRound struct {
	calls     map[protocol.CallKey]JournaledCall
	published bool
	// await holds the calls only awaited, not published again.
	await map[protocol.CallKey]bool
}

// dispatched implements [runJournal]. A resumed round's calls take their
// timeouts and deadlines from the journal.
func (js *journalState) dispatched(ctx context.Context, round int, calls []roundCall, todo []int) (rr *resumedRound, ok bool) {
	ru := js.ru
	rr = js.rp.resumed(round)
	if rr == nil {
		return nil, js.append(ctx, JournalEntry{Kind: EntryDispatched, Round: round, Calls: dispatchedCalls(calls, todo)})
	}
	for _, i := range todo {
		c := &calls[i]
		if jc, ok := rr.calls[c.key]; ok {
			c.timeout = time.Duration(jc.TimeoutMS) * time.Millisecond
			c.deadline = protocol.CallDeadline{At: jc.Deadline, Grace: ru.cfg.Grace}
			// Its progress notice went to the previous owner: a
			// non-idempotent call may have started.
			c.started = !c.entry.spec.Idempotent
		}
	}
	// The round's calls, as journaled, are the only ones a result read
	// before they are reached is kept for, and the inbox takes each only
	// from its own tool.
	ru.resumed = rr
	if ex, ok := ru.inbox.(ExpectInbox); ok {
		for _, c := range rr.calls {
			ex.Expect(c.CallKey, protocol.ToolName(c.Tool))
		}
	}
	if !rr.published {
		// Some calls may have been published and answered before the
		// crash: their results are read first and they are not published
		// again.
		ru.catchUp(ctx)
		ru.drainEarly(round)
	}
	// A call is not published again, only awaited, when its round
	// journaled that every publish returned, its result was read already,
	// or it is past the deduplication window.
	rr.await = map[protocol.CallKey]bool{}
	for _, i := range todo {
		c := &calls[i]
		_, answered := ru.early[c.key]
		rr.await[c.key] = rr.published || answered || ru.pastDedup(rr, c)
	}
	return rr, true
}

// resumed returns round as journaled dispatched, or nil.
func (rp *replay) resumed(round int) *resumedRound {
	jc, ok := rp.dispatched[round]
	if !ok {
		return nil
	}
	rr := &resumedRound{calls: make(map[protocol.CallKey]JournaledCall, len(jc)), published: rp.published[round]}
	for _, c := range jc {
		rr.calls[c.CallKey] = c
	}
	return rr
}

// pastDedup reports whether c is a non-idempotent call of a resumed round
// first dispatched longer ago than Config.DedupWindow: publishing it again
// would store a new call, which a worker could run a second time, so it is
// awaited where it is (outcome_unknown at its deadline) instead.
func (ru *run) pastDedup(rr *resumedRound, c *roundCall) bool {
	jc, ok := rr.calls[c.key]
	if !ok || c.entry.spec.Idempotent {
		return false
	}
	dispatched := jc.Deadline.Add(-time.Duration(jc.TimeoutMS) * time.Millisecond)
	return ru.cfg.Now().Sub(dispatched) >= ru.cfg.DedupWindow
}

// published implements [runJournal].
func (js *journalState) published(ctx context.Context, round int, rr *resumedRound, interrupted bool) bool {
	if (rr == nil || !rr.published) && !interrupted && !js.appendLater(ctx, JournalEntry{Kind: EntryPublished, Round: round}) {
		return false
	}
	if rr != nil {
		js.ru.catchUp(ctx)
	}
	return true
}

// maxEarlyResults bounds the results a durable run keeps for calls it has
// not reached yet.
const maxEarlyResults = 1024

// takeEarly answers the pending calls whose results were read before they
// were reached.
func (ru *run) takeEarly(pending map[protocol.CallKey]*roundCall) {
	for key, c := range pending {
		if res, ok := ru.early[key]; ok {
			delete(ru.early, key)
			delete(pending, key)
			ru.keys[key] = keyByResult
			ru.fromResult(c, res)
		}
	}
}

// keepEarly keeps res, a result for a call key the run does not know,
// when it answers a call of the round being resumed that is not reached
// yet; otherwise it returns why res is dropped. A result for any other
// call nobody published is not kept: it would answer that call without
// running it.
func (ru *run) keepEarly(res protocol.Result, tool protocol.ToolName) (drop string) {
	if _, dup := ru.early[res.CallKey]; dup {
		// The first stored is taken, as the first to arrive is for a
		// pending call.
		return dropDuplicate
	}
	jc, resumed := ru.resumed.call(res.CallKey)
	switch {
	case !resumed:
		return dropUnknownKey
	case tool != "" && string(tool) != jc.Tool:
		return dropToolMismatch
	case len(ru.early) >= maxEarlyResults:
		return dropUnknownKey
	}
	ru.early[res.CallKey] = res
	return ""
}

// call returns the journaled call of key, if key is a call of rr.
func (rr *resumedRound) call(key protocol.CallKey) (JournaledCall, bool) {
	if rr == nil {
		return JournaledCall{}, false
	}
	c, ok := rr.calls[key]
	return c, ok
}

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
	none := map[protocol.CallKey]*roundCall{}
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
	case <-ru.handoff:
	case <-t.C:
		ru.log.Warn().Str(logKeyEvent, evCatchUpSlow).Send()
	}
}

// observed implements [runJournal]: the observations are held and stored
// with the run's next entry (the next round's model response and what it
// decides, an input, the run's end), so a round waits for one append. A
// run that crashes before that entry is stored resumes the round as one
// whose publishes returned: it reads the results stored meanwhile and
// awaits the others; the model response it was given is not journaled and
// is asked again. The round being resumed, if any, is over: its calls are
// forgotten.
func (js *journalState) observed(ctx context.Context, round int, calls []roundCall) bool {
	js.ru.resumed = nil
	return js.hold(ctx, JournalEntry{Kind: EntryObserved, Round: round, Observations: observations(calls)})
}

// dispatchedCalls is the journal form of the calls about to be published.
func dispatchedCalls(calls []roundCall, todo []int) []JournaledCall {
	out := make([]JournaledCall, 0, len(todo))
	for _, i := range todo {
		c := &calls[i]
		out = append(out, JournaledCall{CallKey: c.key, Tool: c.name, TimeoutMS: c.timeout.Milliseconds(), Deadline: c.deadline.At})
	}
	return out
}

// observations is the journal form of a round's answered calls.
func observations(calls []roundCall) []JournaledObservation {
	out := make([]JournaledObservation, len(calls))
	for i := range calls {
		c := &calls[i]
		out[i] = c.ans
		out[i].CallKey, out[i].DurationMS = c.key, ms(c.end.Sub(c.start))
	}
	return out
}
