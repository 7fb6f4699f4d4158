package loop

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// Journal entry kinds, in the order a round appends them.
const (
	// EntryStart: the run started; its first entry, before any other of
	// the loop's. Secret seeds the run's call keys.
	EntryStart = "start"
	// EntryTools: the tool specs the catalog offered for Round.
	EntryTools = "tools"
	// EntryModel: the model's Response in Round.
	EntryModel = "model"
	// EntryApprovalRequested: the round's calls that wait for a human, with
	// their one deadline.
	EntryApprovalRequested = "approval_requested"
	// EntryApprovalDecided: the gate's answer for one call.
	EntryApprovalDecided = "approval_decided"
	// EntryDispatched: the round's calls about to be published, with their
	// keys and deadlines (appended before the first Publish).
	EntryDispatched = "dispatched"
	// EntryPublished: every Publish of the round returned.
	EntryPublished = "published"
	// EntryObserved: one observation per call of the round, in request
	// order (stored with the next model response, or while a slow model
	// thinks).
	EntryObserved = "observed"
	// EntryFinished: the run's termination reason and answer.
	EntryFinished = "finished"
	// EntryParked: the model failed in Round ([Durable.Park] said to
	// park): the run stopped before that round's model step, with Reason,
	// and waits to be resumed. Data is [Durable.ParkData]. A resumed run
	// asks the model for Round again; any entry after it says the run was
	// taken again.
	EntryParked = "parked"
	// EntryInput: the run's client added Input; its message follows
	// Round's tool messages (Round 0: the run's input), before the next
	// model step. An interrupt journaled while Round was in flight came
	// before that round's withdrawals.
	EntryInput = "input"
)

// ErrJournal is wrapped by every error of a journaled run that stopped
// because an entry could not be appended (among them [ErrFenced]). Such a
// run returns a nil Result: it did nothing past its last entry, and another
// owner may resume it from the journal.
var ErrJournal = errors.New("loop: journal append failed")

// ErrFenced is returned by a [Journal] whose run was taken over by another
// owner: this one may no longer append, publish or store anything.
var ErrFenced = errors.New("loop: the run has another owner")

// ErrHandedOff is returned by a journaled run that stopped at a step
// boundary because [Durable.Handoff] was closed. Its Result is nil; the
// journal holds everything another owner needs to resume it.
var ErrHandedOff = errors.New("loop: the run was handed off")

// IncompleteJournal is a [Journal] that can tell it lost entries: the run
// was started before, and what its journal holds does not begin at the
// run's start (its first entries were removed, or all of them).
type IncompleteJournal interface {
	Journal
	Incomplete() bool
}

// Journal is where a durable run records every step that decides what
// happens next, before it takes effect. The loop never reads it after the
// run started: a resumed run gets what was journaled before from Entries.
type Journal interface {
	// Entries returns what was journaled before this run (re)started, in
	// order; empty for a new run.
	Entries() []JournalEntry
	// Append journals e. It is called from one goroutine at a time. Any
	// error stops the run at once (see ErrJournal); ErrFenced says another
	// owner took it.
	Append(ctx context.Context, e JournalEntry) error
}

// PipelinedJournal is a [Journal] that can store an entry while the run
// goes on. The loop uses it only for an entry whose step has already taken
// effect and that nothing waits on (EntryPublished: every publish of the
// round returned), and waits for it before the run's next effect — a
// withdrawal, a cancel, its next append — so a fenced owner still does
// nothing more than it does with [Journal.Append].
type PipelinedJournal interface {
	Journal
	// AppendAsync starts to append e and returns at once, with a channel
	// closed when the append is settled (stored or failed). At most one is
	// in flight: the next AppendAsync, Append or Flush waits for it first,
	// and its error is theirs.
	AppendAsync(ctx context.Context, e JournalEntry) (settled <-chan struct{})
	// Flush waits for the append AppendAsync started and returns its
	// error (nil when none is in flight).
	Flush(ctx context.Context) error
}

// BatchJournal is a [Journal] that can store several entries in one
// append: all of them or none, fenced as one. The loop holds a model
// response's entry back and stores it with the round's next entry (its
// calls' dispatch, its approval requests, its observations or the run's
// end) — before any of the response's effects, in one round trip instead
// of two.
type BatchJournal interface {
	Journal
	// AppendBatch journals es, in order, as one append.
	AppendBatch(ctx context.Context, es []JournalEntry) error
}

// JournalEntry is one step of a run. Kind says which fields are set.
type JournalEntry struct {
	Kind  string `json:"kind"`
	Round int    `json:"round,omitempty"`
	// Tools is set for EntryTools.
	Tools []protocol.ToolSpec `json:"tools,omitempty"`
	// Response is set for EntryModel.
	Response *JournaledResponse `json:"response,omitempty"`
	// Calls is set for EntryApprovalRequested and EntryDispatched.
	Calls []JournaledCall `json:"calls,omitempty"`
	// Deadline is the approval deadline of EntryApprovalRequested.
	Deadline time.Time `json:"deadline,omitzero"`
	// Decision is set for EntryApprovalDecided.
	Decision *JournaledDecision `json:"decision,omitempty"`
	// Observations is set for EntryObserved.
	Observations []JournaledObservation `json:"observations,omitempty"`
	// Termination and Answer are set for EntryFinished.
	Termination TerminationReason `json:"termination,omitempty"`
	Answer      string            `json:"answer,omitempty"`
	// Reason is set for EntryParked: why the run parked, as
	// [Durable.Park] said it. A journal reader older than parking refuses
	// the field, so it never resumes a parked run it cannot read.
	Reason string `json:"reason,omitempty"`
	// Input is set for EntryInput. A journal reader older than inputs
	// refuses the field, so it never resumes a run it would replay
	// without them.
	Input *Input `json:"input,omitempty"`
	// Owner, Note and At are free for the journal's own entries (who took
	// the run, and when); the loop ignores entries of kinds it does not
	// know.
	Owner string `json:"owner,omitempty"`
	// Data of EntryStart holds the run's input ({"messages": [...]}) when it
	// is within MaxJournaledInputBytes, for [Replay] and [ForkMessages].
	// Secret is set for EntryStart: the run's call keys and coordinator-
	// made call ids are derived from it, so that nobody who does not read
	// the journal can predict them.
	Secret string `json:"secret,omitempty"`
	// Policy is set for EntryStart: what protects the run, which whoever
	// resumes it applies at least ([RunPolicy]).
	Policy *RunPolicy      `json:"policy,omitempty"`
	Note   string          `json:"note,omitempty"`
	At     time.Time       `json:"at,omitzero"`
	Data   json.RawMessage `json:"data,omitempty"`
}

// JournaledResponse is a model response as journaled.
type JournaledResponse struct {
	Message      Message `json:"message"`
	Usage        Usage   `json:"usage"`
	FinishReason string  `json:"finish_reason,omitempty"`
}

// JournaledCall is one call of an approval request or a dispatch.
type JournaledCall struct {
	CallKey   protocol.CallKey `json:"call_key"`
	Tool      string           `json:"tool"`
	TimeoutMS int64            `json:"timeout_ms,omitempty"`
	Deadline  time.Time        `json:"deadline,omitzero"`
}

// JournaledDecision is how the gate settled one call: approved (Outcome
// empty), or answered with Outcome and Content (denied, expired, gate
// failure, cancelled).
type JournaledDecision struct {
	CallKey    protocol.CallKey `json:"call_key"`
	GateResult string           `json:"gate_result,omitempty"`
	Outcome    protocol.Outcome `json:"outcome,omitempty"`
	Content    string           `json:"content,omitempty"`
	// Proof is an approval's place in the approvals stream, which the call
	// carries to the worker: a resumed run publishes the call with it.
	Proof *protocol.ApprovalProof `json:"proof,omitempty"`
}

// JournaledObservation is how one call of a round was answered.
type JournaledObservation struct {
	CallKey    protocol.CallKey `json:"call_key,omitempty"`
	Outcome    protocol.Outcome `json:"outcome"`
	Content    string           `json:"content"`
	Worker     string           `json:"worker,omitempty"`
	Attempt    int              `json:"attempt,omitempty"`
	Truncated  bool             `json:"truncated,omitempty"`
	ErrorType  string           `json:"error_type,omitempty"`
	DurationMS int64            `json:"duration_ms,omitempty"`
	GateResult string           `json:"gate_result,omitempty"`
}

// Durable is a journaled run: its input, its journal and its hand-off
// signal.
type Durable struct {
	// Prompt or Messages is the run's input, as for Run and RunMessages.
	Prompt   string
	Messages []Message
	// RunID is the run's id. Required: a valid subject token. The call
	// keys are derived from it and a random secret journaled in the run's
	// first entry (EntryStart), so a resumed run addresses the same calls
	// and nobody else can predict them.
	RunID protocol.RunID
	// Journal is required.
	Journal Journal
	// Handoff, when closed, stops the run at its next step boundary with
	// ErrHandedOff, leaving nothing half-done that the journal does not
	// say: no call is cancelled, no observation synthesized.
	Handoff <-chan struct{}
	// Park, when set, is asked about each model failure (the model's own
	// retries spent, the run's context still live). A non-empty reason
	// parks the run instead of failing it: EntryParked is journaled with
	// the reason, and the run returns a Result with TerminationParked and
	// ParkReason, and a nil error. Every call of the rounds before is
	// answered (a model step follows only observed rounds); the round's
	// model step is asked again when the run is resumed. The reason is
	// journaled and shown to operators: it must not quote a secret or
	// what the model server wrote. Default (nil): a model failure fails
	// the run (TerminationError).
	Park func(err error) (reason string)
	// ParkData is journaled with EntryParked, for whoever resumes the run
	// (a serving coordinator keeps the run's request there).
	ParkData json.RawMessage
	// Input, when set, delivers user messages the run's client adds while
	// it runs ([Input]). The loop reads it at each step boundary and while
	// a round gathers its results, never blocking on it, and journals
	// each input before it takes effect. Default (nil): the run takes no
	// input.
	Input <-chan Input
}

// RunDurable runs (or resumes) a journaled run. Every step that decides
// what happens next is appended to d.Journal before it takes effect; the
// entries already there are replayed instead of being done again: a
// journaled model response is not asked again, a journaled observation is
// not gathered again, a dispatched call is gathered where it is (from the
// results the Dispatcher's inbox delivers) and is published again only when
// its round did not journal that every publish returned, and a journaled
// approval request keeps its deadline.
//
// A run stopped by a journal error or a hand-off returns a nil Result and
// an error wrapping ErrJournal or ErrHandedOff; otherwise RunDurable is
// RunMessages.
//
// A run is never resumed from a journal that lost entries: when the
// journal says so ([IncompleteJournal]) or its entries do not begin with
// the run's start, the run ends at once with TerminationJournalLost —
// nothing asked, published or run again; the calls it had open are not
// known here, and their results are not awaited.
func (r *Runner) RunDurable(ctx context.Context, d Durable) (*Result, error) {
	if d.Journal == nil || !d.RunID.Valid() {
		return nil, &ConfigError{Field: "journal", Value: string(d.RunID), Rule: "needs a journal and a valid run id"}
	}
	msgs := d.Messages
	if msgs == nil {
		if strings.TrimSpace(d.Prompt) == "" {
			return nil, errors.New("loop: " + ErrInvalidInput.Error() + ": empty prompt")
		}
		msgs = []Message{{Role: "user", Content: d.Prompt}}
	} else {
		fixed, unanswered, err := repairInput(msgs)
		if err != nil {
			return nil, err
		}
		if unanswered > 0 {
			r.cfg.Logger.Warn().Str(logKeyEvent, evInputUnanswered).Int(logKeyCount, unanswered).Send()
		}
		msgs = fixed
	}
	ru := r.newRun(cloneMessages(msgs), d.RunID)
	entries := d.Journal.Entries()
	js := &journalState{ru: ru, j: d.Journal, log: ru.log, handoffC: d.Handoff, rp: indexEntries(entries)}
	ru.j, ru.handoff = js, d.Handoff
	ru.park, ru.parkData, ru.input = d.Park, d.ParkData, d.Input
	defer ru.closeInbox()
	r.cfg.Observer.RunStarted()
	start, lost := runStart(d.Journal, entries)
	switch {
	case lost:
		// Nothing of it is appended: the journal is not the run's.
		js.lost = true
		ru.log.Error().Str(logKeyEvent, evJournalLost).Int(logKeyCount, len(entries)).Send()
		return ru.finish(TerminationJournalLost, "", nil)
	case start == nil:
		// The input is journaled with the start, for a replay or a fork
		// (control_replay.go); the loop never reads it back. The start is
		// held and stored with the run's first step: a run whose owner
		// died before that has done nothing, and starts again.
		start = &JournalEntry{Kind: EntryStart, Secret: newSecret(), Policy: policyOf(ru.cfg), Data: encodeInput(ru.msgs)}
		if !js.hold(ctx, *start) {
			return nil, js.err
		}
	default:
		// A resumed run keeps what protected it when it started, whoever
		// resumes it; one whose start journaled no policy (an older
		// coordinator's) needs approval for every call.
		p := start.Policy
		if p == nil {
			p = &failClosedPolicy
			ru.log.Warn().Str(logKeyEvent, evPolicyMissing).Send()
		}
		cfg := p.tighten(*ru.cfg)
		ru.cfg, ru.approvals, ru.ctl = &cfg, newApprovalSet(cfg.RequireApproval), controlOf(&cfg)
	}
	secret := start.Secret
	ru.secret = secret
	res, err := ru.execute(ctx)
	js.flush(ctx)
	js.storeHeldAlone(ctx)
	if js.err != nil {
		return nil, js.err
	}
	return res, err
}

// journalState is a durable run's journal and what it replays: its
// [runJournal].
type journalState struct {
	ru       *run
	j        Journal
	log      zerolog.Logger
	handoffC <-chan struct{}
	rp       *replay
	err      error // the first append failure or hand-off: the run stops
	lost     bool  // a cancelled run's append failed: it ends unjournaled
	// pending: an entry of this kind is being appended (PipelinedJournal);
	// pendingC is closed when it is stored or failed.
	pending  string
	pendingC <-chan struct{}
	// later is an entry that is appended only if the round still gathers
	// its results when laterTimer fires (appendLater), or before the run's
	// next effect.
	later      *JournalEntry
	laterTimer *time.Timer
	// held are the entries kept back (BatchJournal), in order, to be
	// stored with the next one, or by themselves when the run stops
	// first.
	held []JournalEntry
}

// maxHeld bounds the entries held back: one more is appended with them.
const maxHeld = 5

// heldModelWait is how long the entries held back when the model is asked
// (a round's observations; a run's start and its tools) wait for its
// response, to be stored with it in one append. A model slower than that
// does not hold them longer: they are stored while it thinks, so that
// whoever follows the run's journal sees a round's answers without
// waiting for the next response, and the run, once it has the response,
// waits for at most what is left of that store.
var heldModelWait = 20 * time.Millisecond

// publishedWait is how long a round gathers its results before it
// journals that every publish returned. A round whose calls are all
// answered sooner journals nothing for it: its observations, stored next,
// tell a resumed run more, and until they are, a resumed run reads the
// round's stored results first and publishes again only a call with none,
// deduplicated (DedupWindow; past it, a non-idempotent call is awaited, not
// published again).
var publishedWait = 250 * time.Millisecond

// minSecretLen bounds a journaled secret from below.
const minSecretLen = 26

// newSecret returns a fresh random secret of 160 bits.
func newSecret() string {
	var b [20]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return keyEncoding.EncodeToString(b[:])
}

// runStart returns the run's start entry from its journal (nil for a run
// not started yet), and whether the journal lost entries: it says so, or
// it holds entries of the loop that do not begin with the run's start.
func runStart(j Journal, entries []JournalEntry) (start *JournalEntry, lost bool) {
	if ij, ok := j.(IncompleteJournal); ok && ij.Incomplete() {
		return nil, true
	}
	for i, e := range entries {
		switch e.Kind {
		case EntryStart:
			return &entries[i], len(e.Secret) < minSecretLen
		case EntryTools, EntryModel, EntryApprovalRequested, EntryApprovalDecided, EntryDispatched,
			EntryPublished, EntryObserved, EntryFinished, EntryParked, EntryInput:
			return nil, true // a step of the run, and no start before it
		}
	}
	return nil, false
}

// cancelledAppendTimeout bounds an append of a run being cancelled.
const cancelledAppendTimeout = time.Second

// runJournal is where a run meets its journal, at named points: the run's
// own steps (its tools, its model response, its end) are appended before
// they take effect, and a round calls one method for each of its points,
// from replayObserved to observed; at a step boundary checkpoint says
// whether the run must stop. A plain run's is [noJournal]: it journals
// nothing, replays nothing and never stops the run; a durable run's is a
// *journalState, whose round points, and what they replay, are in
// replay.go.
type runJournal interface {
	// append journals e before it takes effect; false: the run must stop
	// (checkpoint returns why).
	append(ctx context.Context, e JournalEntry) bool
	// hold journals e with the run's next entry when the journal can
	// (BatchJournal), else at once as append does. Nothing e decides may
	// take effect before that next entry.
	hold(ctx context.Context, e JournalEntry) bool
	// flush waits for the entry published left in flight, before the
	// run's next effect; false: the run must stop.
	flush(ctx context.Context) bool
	// storeHeld stores an entry hold kept back, alone, before an effect
	// that follows no append of its own (a cancel); false: the run must
	// stop.
	storeHeld(ctx context.Context) bool
	// askingModel is called as the run asks the model, and the function
	// it returns once the model answered: the entries held back are
	// stored while the model takes longer than heldModelWait.
	askingModel(ctx context.Context) (answered func())
	// settled is closed when the entry published left in flight is
	// settled; nil when none is.
	settled() <-chan struct{}
	// due fires when the entry published put off is to be appended
	// (appendDue); nil when none is put off.
	due() <-chan time.Time
	// appendDue starts to append the entry published put off, as
	// published would have; false: the run must stop.
	appendDue(ctx context.Context) bool
	// gathered says every call of the round was answered and nothing is
	// left to cancel: the entry published put off is not appended.
	gathered()
	// checkpoint is a step boundary: it returns the error that stops the
	// run, if any — the first failed append, or ErrHandedOff, which it
	// records once the hand-off signal came.
	checkpoint() error
	// replay is what the journal held when the run (re)started; nil for a
	// plain run.
	replay() *replay

	// The round's points, in the order it reaches them (replay.go):

	// replayObserved answers every call of a round whose observations
	// are journaled, as they were; false when the round was not observed.
	replayObserved(round int, calls []roundCall) bool
	// approvalsRequested journals the round's wait for approvals of the
	// waiting calls, with its deadline, before it starts; a resumed wait
	// keeps its journaled deadline and applies the decisions journaled.
	// It returns the deadline and the calls still waiting; ok false: the
	// run must stop.
	approvalsRequested(ctx context.Context, round int, calls []roundCall, waiting []int, deadline time.Time) (time.Time, []int, bool)
	// approvalDecided journals how the gate settled c, before it takes
	// effect.
	approvalDecided(ctx context.Context, c *roundCall) bool
	// dispatched journals the round's calls to publish (todo), with their
	// deadlines, before the first publish. A resumed round tells the
	// inbox of its calls and, when not every publish returned before,
	// reads the results stored meanwhile first; it returns the resumed
	// round (nil: a new one), which says which calls are only awaited.
	dispatched(ctx context.Context, round int, calls []roundCall, todo []int) (*resumedRound, bool)
	// published journals that every publish of the round returned
	// (unless interrupted), while the results are gathered, once they
	// have been for publishedWait (due), or not at all when they all came
	// sooner (gathered): nothing waits on it but the round's next effect,
	// which appends it and waits for it first (flush). A resumed round
	// then waits for its inbox to catch up.
	published(ctx context.Context, round int, rr *resumedRound, interrupted bool) bool
	// observed journals the round's observations with the run's next
	// entry (hold), before anything they decide takes effect.
	observed(ctx context.Context, round int, calls []roundCall) bool
}

// noJournal is a plain run's [runJournal].
type noJournal struct{}

func (noJournal) append(context.Context, JournalEntry) bool { return true }
func (noJournal) hold(context.Context, JournalEntry) bool   { return true }
func (noJournal) flush(context.Context) bool                { return true }
func (noJournal) storeHeld(context.Context) bool            { return true }
func (noJournal) settled() <-chan struct{}                  { return nil }
func (noJournal) askingModel(context.Context) func()        { return func() {} }
func (noJournal) due() <-chan time.Time                     { return nil }
func (noJournal) appendDue(context.Context) bool            { return true }
func (noJournal) gathered()                                 {}
func (noJournal) checkpoint() error                         { return nil }
func (noJournal) replay() *replay                           { return nil }

func (noJournal) replayObserved(int, []roundCall) bool { return false }
func (noJournal) approvalsRequested(_ context.Context, _ int, _ []roundCall, waiting []int, deadline time.Time) (time.Time, []int, bool) {
	return deadline, waiting, true
}
func (noJournal) approvalDecided(context.Context, *roundCall) bool { return true }
func (noJournal) dispatched(context.Context, int, []roundCall, []int) (*resumedRound, bool) {
	return nil, true
}
func (noJournal) published(context.Context, int, *resumedRound, bool) bool { return true }
func (noJournal) observed(context.Context, int, []roundCall) bool          { return true }

var (
	_ runJournal = noJournal{}
	_ runJournal = (*journalState)(nil)
)

func (js *journalState) replay() *replay { return js.rp }

// append implements [runJournal].
func (js *journalState) append(ctx context.Context, e JournalEntry) bool {
	if js.err != nil {
		return false
	}
	if js.lost {
		return true
	}
	if !js.appendDue(ctx) {
		return false
	}
	actx, cancel := appendContext(ctx)
	var err error
	if held := js.held; len(held) > 0 {
		js.held = nil
		err = js.j.(BatchJournal).AppendBatch(actx, append(held, e))
	} else {
		err = js.j.Append(actx, e)
	}
	cancel()
	js.pending, js.pendingC = "", nil
	return js.appended(ctx, e.Kind, err)
}

// hold implements [runJournal]. A run that stops first journals what it
// holds by itself (storeHeldAlone).
func (js *journalState) hold(ctx context.Context, e JournalEntry) bool {
	if js.err != nil || js.lost || len(js.held) >= maxHeld || ctx.Err() != nil {
		return js.append(ctx, e)
	}
	if _, ok := js.j.(BatchJournal); !ok {
		return js.append(ctx, e)
	}
	js.held = append(js.held, e)
	return true
}

// storeHeld implements [runJournal].
func (js *journalState) storeHeld(ctx context.Context) bool {
	if len(js.held) == 0 {
		return true
	}
	js.storeHeldAlone(ctx)
	return js.checkpoint() == nil
}

// askingModel implements [runJournal]. Until answered is called only the
// goroutine it starts touches js: the run is waiting for its model.
func (js *journalState) askingModel(ctx context.Context) (answered func()) {
	if len(js.held) == 0 || js.err != nil || js.lost {
		return func() {}
	}
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTimer(heldModelWait)
		defer t.Stop()
		select {
		case <-t.C:
			js.storeHeldAlone(ctx)
		case <-stop:
		}
	}()
	return func() {
		close(stop)
		<-done
	}
}

// storeHeldAlone journals the entries hold kept back, by themselves, as
// a run stops: one handed off keeps what it was told (a model response is
// not asked again, a round's observations are not gathered again); one
// whose journal failed stores nothing more.
func (js *journalState) storeHeldAlone(ctx context.Context) {
	if len(js.held) == 0 {
		return
	}
	held := js.held
	js.held = nil
	if js.lost || (js.err != nil && !errors.Is(js.err, ErrHandedOff)) {
		return
	}
	actx, cancel := appendContext(ctx)
	var err error
	if len(held) == 1 {
		err = js.j.Append(actx, held[0])
	} else {
		err = js.j.(BatchJournal).AppendBatch(actx, held)
	}
	cancel()
	kind := held[len(held)-1].Kind
	if err != nil && js.err == nil {
		js.appended(ctx, kind, err)
	} else if err != nil {
		js.err = errors.Join(ErrJournal, err)
		js.log.Warn().Str(logKeyEvent, evJournalFailed).Str(logKeyDropReason, kind).Str(logKeyErrorType, errType(err)).Send()
	}
}

// appendContext is the context of an append of a run whose context is
// ctx. A hand-off does not stop an append: what was done (a model answer
// that came in meanwhile) is journaled, so it is not done again. A run
// being cancelled journals its end only if the journal answers soon.
func appendContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx.Err() != nil {
		return context.WithTimeout(context.WithoutCancel(ctx), cancelledAppendTimeout)
	}
	return context.WithoutCancel(ctx), func() {}
}

// appended applies the outcome of an append of kind; false means the run
// must stop (js.err is set).
func (js *journalState) appended(ctx context.Context, kind string, err error) bool {
	if err != nil && ctx.Err() != nil && !errors.Is(err, ErrFenced) {
		// The run is cancelled whatever the journal says: it ends without
		// it (a resume continues it from its last entry).
		js.lost = true
		js.log.Warn().Str(logKeyEvent, evJournalFailed).Str(logKeyDropReason, kind).Str(logKeyErrorType, errType(err)).Send()
		return true
	}
	if err != nil {
		js.err = errors.Join(ErrJournal, err)
		js.log.Warn().Str(logKeyEvent, evJournalFailed).Str(logKeyDropReason, kind).Str(logKeyErrorType, errType(err)).Send()
		return false
	}
	return true
}

// appendAsync journals e as append does, but with a [PipelinedJournal]
// lets the run go on while e is stored; flush (or the next append) waits
// for it. Only for an entry nothing waits on (EntryPublished).
func (js *journalState) appendAsync(ctx context.Context, e JournalEntry) bool {
	if js.err != nil || js.lost || ctx.Err() != nil {
		return js.append(ctx, e)
	}
	pj, ok := js.j.(PipelinedJournal)
	if !ok || len(js.held) > 0 || !js.flush(ctx) {
		return js.append(ctx, e)
	}
	js.pendingC = pj.AppendAsync(context.WithoutCancel(ctx), e)
	js.pending = e.Kind
	return true
}

// appendLater is appendAsync, but only once publishedWait has passed or
// the run is about to take its next effect (flush, append), whichever
// comes first; gathered forgets it. Only for EntryPublished.
func (js *journalState) appendLater(ctx context.Context, e JournalEntry) bool {
	if js.err != nil || js.lost || ctx.Err() != nil || len(js.held) > 0 {
		return js.appendAsync(ctx, e)
	}
	if _, ok := js.j.(PipelinedJournal); !ok {
		return js.append(ctx, e)
	}
	js.later = &e
	js.laterTimer = time.NewTimer(publishedWait)
	return true
}

// due implements [runJournal].
func (js *journalState) due() <-chan time.Time {
	if js.later == nil {
		return nil
	}
	return js.laterTimer.C
}

// appendDue implements [runJournal].
func (js *journalState) appendDue(ctx context.Context) bool {
	e := js.later
	if e == nil {
		return true
	}
	js.later = nil
	js.laterTimer.Stop()
	return js.appendAsync(ctx, *e)
}

// gathered implements [runJournal].
func (js *journalState) gathered() {
	if js.later != nil {
		js.later = nil
		js.laterTimer.Stop()
	}
}

// flush implements [runJournal]: an entry put off is appended first.
func (js *journalState) flush(ctx context.Context) bool {
	if !js.appendDue(ctx) {
		return false
	}
	if js.pending == "" {
		return js.err == nil
	}
	kind := js.pending
	js.pending, js.pendingC = "", nil
	actx, cancel := appendContext(ctx)
	err := js.j.(PipelinedJournal).Flush(actx)
	cancel()
	return js.appended(ctx, kind, err)
}

// checkpoint implements [runJournal].
func (js *journalState) checkpoint() error {
	if js.err != nil {
		return js.err
	}
	select {
	case <-js.handoffC:
		js.err = ErrHandedOff
		return js.err
	default:
		return nil
	}
}

func (js *journalState) settled() <-chan struct{} { return js.pendingC }

var keyEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// derivedToken is a token derived from the run's secret, its id, a
// purpose, the round and the call's index (HMAC-SHA256), so a resumed run
// derives the same call keys and replacement ids as the run it resumes,
// and whoever knows only the run id cannot.
func derivedToken(secret string, run protocol.RunID, purpose string, round, i int) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(string(run) + "\x00" + purpose + "\x00" + strconv.Itoa(round) + "\x00" + strconv.Itoa(i)))
	return keyEncoding.EncodeToString(mac.Sum(nil)[:16])
}
