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
	// order (appended before the next model call).
	EntryObserved = "observed"
	// EntryFinished: the run's termination reason and answer.
	EntryFinished = "finished"
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
	// Owner, Note and At are free for the journal's own entries (who took
	// the run, and when); the loop ignores entries of kinds it does not
	// know.
	Owner string `json:"owner,omitempty"`
	// Secret is set for EntryStart: the run's call keys and coordinator-
	// made call ids are derived from it, so that nobody who does not read
	// the journal can predict them.
	Secret string          `json:"secret,omitempty"`
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
	ru.j = &journalState{j: d.Journal, handoff: d.Handoff, rp: indexEntries(entries)}
	defer ru.closeInbox()
	r.cfg.Observer.RunStarted()
	secret, lost := runSecret(d.Journal, entries)
	switch {
	case lost:
		// Nothing of it is appended: the journal is not the run's.
		ru.j.lost = true
		ru.log.Error().Str(logKeyEvent, evJournalLost).Int(logKeyCount, len(entries)).Send()
		return ru.finish(TerminationJournalLost, "", nil)
	case secret == "":
		secret = newSecret()
		if !ru.appendEntry(ctx, JournalEntry{Kind: EntryStart, Secret: secret}) {
			return nil, ru.j.err
		}
	}
	ru.j.secret = secret
	res, err := ru.execute(ctx)
	ru.flushJournal(ctx)
	ru.storeHeld(ctx)
	if ru.j.err != nil {
		return nil, ru.j.err
	}
	return res, err
}

// journalState is a durable run's journal and what it replays.
type journalState struct {
	j       Journal
	handoff <-chan struct{}
	rp      replay
	err     error // the first append failure or hand-off: the run stops
	lost    bool  // a cancelled run's append failed: it ends unjournaled
	secret  string
	// pending: an entry of this kind is being appended (PipelinedJournal);
	// settled is closed when it is stored or failed.
	pending string
	settled <-chan struct{}
	// held is an entry kept back (BatchJournal) to be stored with the
	// next one, or alone when the run stops first.
	held *JournalEntry
	// tools is what the catalog offered in the last round, journaled in
	// the last tools entry: a round offered the same is not journaled
	// again.
	tools []protocol.ToolSpec
}

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

// runSecret returns the run's secret from its journal ("" for a run not
// started yet), and whether the journal lost entries: it says so, or it
// holds entries of the loop that do not begin with the run's start.
func runSecret(j Journal, entries []JournalEntry) (secret string, lost bool) {
	if ij, ok := j.(IncompleteJournal); ok && ij.Incomplete() {
		return "", true
	}
	for _, e := range entries {
		switch e.Kind {
		case EntryStart:
			return e.Secret, len(e.Secret) < minSecretLen
		case EntryTools, EntryModel, EntryApprovalRequested, EntryApprovalDecided, EntryDispatched,
			EntryPublished, EntryObserved, EntryFinished:
			return "", true // a step of the run, and no start before it
		}
	}
	return "", false
}

// cancelledAppendTimeout bounds an append of a run being cancelled.
const cancelledAppendTimeout = time.Second

// replay indexes journaled entries by what they decide.
type replay struct {
	tools      map[int][]protocol.ToolSpec
	model      map[int]*JournaledResponse
	approvals  map[int]JournalEntry
	decisions  map[protocol.CallKey]JournaledDecision
	dispatched map[int][]JournaledCall
	published  map[int]bool
	observed   map[int][]JournaledObservation
	finished   *JournalEntry
}

func indexEntries(es []JournalEntry) replay {
	rp := replay{
		tools: map[int][]protocol.ToolSpec{}, model: map[int]*JournaledResponse{},
		approvals: map[int]JournalEntry{}, decisions: map[protocol.CallKey]JournaledDecision{},
		dispatched: map[int][]JournaledCall{}, published: map[int]bool{}, observed: map[int][]JournaledObservation{},
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
		}
	}
	return rp
}

// journaledTools returns the tools round offered, as journaled: its own
// tools entry, or, for a round whose model response is journaled without
// one (it was offered what the round before was), the last tools entry
// before it.
func (rp replay) journaledTools(round int) ([]protocol.ToolSpec, bool) {
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

// appendEntry journals e; false means the run must stop (ru.j.err is set).
// A run without a journal always goes on.
func (ru *run) appendEntry(ctx context.Context, e JournalEntry) bool {
	if ru.j == nil {
		return true
	}
	if ru.j.err != nil {
		return false
	}
	if ru.j.lost {
		return true
	}
	actx, cancel := appendContext(ctx)
	var err error
	if held := ru.j.held; held != nil {
		ru.j.held = nil
		err = ru.j.j.(BatchJournal).AppendBatch(actx, []JournalEntry{*held, e})
	} else {
		err = ru.j.j.Append(actx, e)
	}
	cancel()
	ru.j.pending, ru.j.settled = "", nil
	return ru.appended(ctx, e.Kind, err)
}

// holdEntry journals e with the run's next entry when the journal can
// (BatchJournal), else at once as appendEntry does. Nothing e decides
// may take effect before that next entry: the run's effects all follow an
// append, and a run that stops first journals e alone (storeHeld).
func (ru *run) holdEntry(ctx context.Context, e JournalEntry) bool {
	if ru.j == nil || ru.j.err != nil || ru.j.lost || ru.j.held != nil || ctx.Err() != nil {
		return ru.appendEntry(ctx, e)
	}
	if _, ok := ru.j.j.(BatchJournal); !ok {
		return ru.appendEntry(ctx, e)
	}
	ru.j.held = &e
	return true
}

// storeHeld journals the entry holdEntry kept back, alone, as a run
// stops: one handed off keeps what it was told (a model response is not
// asked again); one whose journal failed stores nothing more.
func (ru *run) storeHeld(ctx context.Context) {
	if ru.j == nil || ru.j.held == nil {
		return
	}
	held := ru.j.held
	ru.j.held = nil
	if ru.j.lost || (ru.j.err != nil && !errors.Is(ru.j.err, ErrHandedOff)) {
		return
	}
	actx, cancel := appendContext(ctx)
	err := ru.j.j.Append(actx, *held)
	cancel()
	if err != nil && ru.j.err == nil {
		ru.appended(ctx, held.Kind, err)
	} else if err != nil {
		ru.j.err = errors.Join(ErrJournal, err)
		ru.log.Warn().Str(logKeyEvent, evJournalFailed).Str(logKeyDropReason, held.Kind).Str(logKeyErrorType, errType(err)).Send()
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
// must stop (ru.j.err is set).
func (ru *run) appended(ctx context.Context, kind string, err error) bool {
	if err != nil && ctx.Err() != nil && !errors.Is(err, ErrFenced) {
		// The run is cancelled whatever the journal says: it ends without
		// it (a resume continues it from its last entry).
		ru.j.lost = true
		ru.log.Warn().Str(logKeyEvent, evJournalFailed).Str(logKeyDropReason, kind).Str(logKeyErrorType, errType(err)).Send()
		return true
	}
	if err != nil {
		ru.j.err = errors.Join(ErrJournal, err)
		ru.log.Warn().Str(logKeyEvent, evJournalFailed).Str(logKeyDropReason, kind).Str(logKeyErrorType, errType(err)).Send()
		return false
	}
	return true
}

// appendEntryAsync journals e as appendEntry does, but with a
// [PipelinedJournal] lets the run go on while e is stored; flushJournal
// (or the next append) waits for it. Only for an entry nothing waits on.
func (ru *run) appendEntryAsync(ctx context.Context, e JournalEntry) bool {
	if ru.j == nil || ru.j.err != nil || ru.j.lost || ctx.Err() != nil {
		return ru.appendEntry(ctx, e)
	}
	pj, ok := ru.j.j.(PipelinedJournal)
	if !ok || ru.j.held != nil || !ru.flushJournal(ctx) {
		return ru.appendEntry(ctx, e)
	}
	ru.j.settled = pj.AppendAsync(context.WithoutCancel(ctx), e)
	ru.j.pending = e.Kind
	return true
}

// flushJournal waits for the entry appendEntryAsync left in flight, before
// the run's next effect; false means the run must stop.
func (ru *run) flushJournal(ctx context.Context) bool {
	if ru.j == nil || ru.j.pending == "" {
		return ru.j == nil || ru.j.err == nil
	}
	kind := ru.j.pending
	ru.j.pending, ru.j.settled = "", nil
	actx, cancel := appendContext(ctx)
	err := ru.j.j.(PipelinedJournal).Flush(actx)
	cancel()
	return ru.appended(ctx, kind, err)
}

// stopped reports whether a durable run must stop: an append failed, or
// the hand-off signal came (then it records ErrHandedOff).
func (ru *run) stopped() bool {
	if ru.j == nil {
		return false
	}
	if ru.j.err != nil {
		return true
	}
	select {
	case <-ru.j.handoff:
		ru.j.err = ErrHandedOff
		return true
	default:
		return false
	}
}

// journalSettled is closed when the entry appendEntryAsync left in flight
// is settled; nil when none is.
func (ru *run) journalSettled() <-chan struct{} {
	if ru.j == nil {
		return nil
	}
	return ru.j.settled
}

// handoffC is the hand-off channel, or nil.
func (ru *run) handoffC() <-chan struct{} {
	if ru.j == nil {
		return nil
	}
	return ru.j.handoff
}

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

// dispatchedCalls is the journal form of the calls about to be published.
func dispatchedCalls(slots []callState, todo []int) []JournaledCall {
	out := make([]JournaledCall, 0, len(todo))
	for _, i := range todo {
		s := &slots[i]
		out = append(out, JournaledCall{CallKey: s.key, Tool: s.name, TimeoutMS: s.timeout.Milliseconds(), Deadline: s.deadline.At})
	}
	return out
}

// observations is the journal form of a round's answered calls.
func observations(slots []callState) []JournaledObservation {
	out := make([]JournaledObservation, len(slots))
	for i := range slots {
		s := &slots[i]
		out[i] = JournaledObservation{CallKey: s.key, Outcome: s.outcome, Content: s.obs, Worker: s.worker,
			Attempt: s.attempt, Truncated: s.truncated, ErrorType: s.errorType,
			DurationMS: ms(s.end.Sub(s.start)), GateResult: s.gateResult}
	}
	return out
}
