package loop

import (
	"context"
	"encoding/json"
	"errors"
	"strings"

	"github.com/toolfleet/toolfleet/pkg/protocol"
	"github.com/toolfleet/toolfleet/pkg/schema"
)

// ErrNoInput is returned by [Replay] (unless it is given the input) and
// [ForkMessages] for a journal whose start entry holds no input: a run
// started by a coordinator that did not journal it, or one whose input was
// over [MaxJournaledInputBytes]; or for a journal with no start at all.
var ErrNoInput = errors.New("loop: the run's journal holds no input to start from")

// ErrRunNotEnded is returned by [Replay] and [ForkMessages] for a journal
// without the run's end: the run is still running (or waits for an owner),
// and what it recorded is not its whole story yet. A parked run (its
// journal ends with EntryParked) has stopped: it is replayed and forked as
// one that ended parked.
var ErrRunNotEnded = errors.New("loop: the run has not ended")

// ReplayInput is what [Replay] re-runs: a recorded run's journal, and what
// to change.
type ReplayInput struct {
	// Entries is the recorded run's journal, in order (entries of kinds
	// the loop does not know are skipped). Required.
	Entries []JournalEntry
	// Messages, when set, replaces the run's journaled input.
	Messages []Message
	// Instructions, when set, replace the input's leading system messages
	// (or come first when it has none): an agent's new instructions.
	Instructions string
}

// ReplayReport is where a replay diverged from the recorded run.
type ReplayReport struct {
	// Diverged is false when every round made the calls the recorded run
	// made, with the same arguments, and the run ended the same way.
	Diverged bool `json:"diverged"`
	// FirstDivergingRound is the first round that differs; 0 when none.
	FirstDivergingRound int `json:"first_diverging_round,omitempty"`
	// Rounds holds each round that differs, in order.
	Rounds []RoundDiff `json:"rounds,omitempty"`
	// Recorded and Replayed sum up the two runs.
	Recorded RunSummary `json:"recorded"`
	Replayed RunSummary `json:"replayed"`
	// ReplayedCalls counts the replay's calls answered from the journal,
	// NotReplayedCalls those it answered not_replayed. None ran.
	ReplayedCalls    int `json:"replayed_calls"`
	NotReplayedCalls int `json:"not_replayed_calls"`
	// Result is the replay's own result, its transcript included.
	Result *Result `json:"-"`
}

// RunSummary is how a run ended.
type RunSummary struct {
	Rounds      int               `json:"rounds"`
	Termination TerminationReason `json:"termination"`
	ToolCalls   int               `json:"tool_calls"`
}

// RoundDiff is how one round of a replay differs from the recorded one.
// Calls are compared by tool name and canonical arguments; a call of the
// same tool with other arguments is Changed.
type RoundDiff struct {
	Round   int          `json:"round"`
	Added   []CallDigest `json:"added,omitempty"`
	Dropped []CallDigest `json:"dropped,omitempty"`
	Changed []CallChange `json:"changed,omitempty"`
	// AnswerChanged: in this round one of the two runs answered (made no
	// call) and the other did not, or both answered differently.
	AnswerChanged bool `json:"answer_changed,omitempty"`
}

// CallDigest names a call without its argument values: its tool (as the
// model wrote it, clipped), its argument keys and the digest of its
// canonical arguments ("invalid" when they are not a JSON object).
type CallDigest struct {
	Tool    string   `json:"tool"`
	ArgKeys []string `json:"arg_keys"`
	Digest  string   `json:"digest"`
}

// CallChange is a call of the same tool with other arguments.
type CallChange struct {
	From CallDigest `json:"from"`
	To   CallDigest `json:"to"`
}

// Replay re-runs the model steps of an ended run against its journal, with
// model and cfg (new instructions in in.Instructions or in.Messages), and
// reports where the new run diverges from the recorded one. Every call the
// new model makes is validated against the tools the recorded round was
// offered; a call the recorded run made with the same tool and canonical
// arguments (each recorded answer used once, in journal order) is answered
// as the journal says, any other not_replayed. Nothing is published,
// nothing runs and no gate is asked: Replay reads only in.Entries and
// calls only model.
//
// The recorded run's limits apply (its journaled [RunPolicy], lowered by
// cfg's). A model error ends the replay as it ends a run: the report is
// returned with the error.
func Replay(ctx context.Context, cfg Config, model Model, in ReplayInput) (*ReplayReport, error) {
	rec, err := recordedRun(in.Entries)
	if err != nil {
		return nil, err
	}
	msgs := rec.input
	if in.Messages != nil {
		msgs = in.Messages
	} else if rec.inputErr != nil {
		return nil, rec.inputErr
	}
	if in.Instructions != "" {
		msgs = withInstructions(msgs, in.Instructions)
	}
	rp := newReplayer(rec)
	res, err := rp.run(ctx, cfg, model, msgs, 0)
	if res == nil {
		return nil, err
	}
	rep := rec.compare(res, rp.inputLen)
	rep.ReplayedCalls, rep.NotReplayedCalls, rep.Result = rp.replayed, rp.notReplayed, res
	return rep, err
}

// recorded is an ended run as its journal holds it.
type recorded struct {
	rp    *replay
	input []Message
	// inputErr says why input is nil (ErrNoInput).
	inputErr error
	policy   *RunPolicy
	rounds   int // the last round with a model response
	// parked is the round whose model failed when the run parked; 0 for
	// a run that ended.
	parked int
}

// recordedRun reads an ended run from its journal: its start, its rounds
// and its end. A run whose start holds no input (or one that does not
// decode) has inputErr set.
func recordedRun(entries []JournalEntry) (*recorded, error) {
	var start *JournalEntry
	for i := range entries {
		if entries[i].Kind == EntryStart {
			start = &entries[i]
			break
		}
	}
	rp := indexEntries(entries)
	parked := 0
	if last := lastLoopEntry(entries); rp.finished == nil && last != nil && last.Kind == EntryParked {
		rp.finished, parked = &JournalEntry{Kind: EntryFinished, Termination: TerminationParked}, last.Round
	}
	switch {
	case start == nil:
		return nil, ErrNoInput
	case rp.finished == nil:
		return nil, ErrRunNotEnded
	}
	input, err := decodeInput(start.Data)
	rec := &recorded{rp: rp, input: input, inputErr: err, policy: start.Policy, parked: parked}
	for r := range rp.model {
		rec.rounds = max(rec.rounds, r)
	}
	return rec, nil
}

// MaxJournaledInputBytes bounds the input a durable run journals in its
// start entry (what [Replay] and [ForkMessages] start from): a larger
// input is not journaled, and such a run cannot be replayed or forked.
const MaxJournaledInputBytes = 256 << 10

// journaledInput is the form of a run's input in its start entry's Data.
type journaledInput struct {
	Messages []Message `json:"messages"`
}

// encodeInput is the start entry's Data for input msgs; nil when they are
// over MaxJournaledInputBytes.
func encodeInput(msgs []Message) json.RawMessage {
	data, err := json.Marshal(journaledInput{Messages: msgs})
	if err != nil || len(data) > MaxJournaledInputBytes {
		return nil
	}
	return data
}

// decodeInput decodes a start entry's Data strictly: the input messages,
// as repairInput accepts them.
func decodeInput(data json.RawMessage) ([]Message, error) {
	if len(data) == 0 || len(data) > MaxJournaledInputBytes {
		return nil, ErrNoInput
	}
	var in journaledInput
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil || dec.More() {
		return nil, errors.Join(ErrNoInput, errors.New("loop: the journaled input does not decode"))
	}
	msgs, _, err := repairInput(in.Messages)
	if err != nil {
		return nil, errors.Join(ErrNoInput, err)
	}
	return msgs, nil
}

// withInstructions returns msgs with its leading system messages replaced
// by one holding instructions.
func withInstructions(msgs []Message, instructions string) []Message {
	i := 0
	for i < len(msgs) && msgs[i].Role == "system" {
		i++
	}
	return append([]Message{{Role: "system", Content: instructions}}, msgs[i:]...)
}

// replayer is a replay's [control] and [Catalog]: it offers each round the
// tools the recorded round was offered, and answers every valid call from
// the recorded answers, before the gate.
type replayer struct {
	rec *recorded
	// answers holds the recorded answers of valid calls by tool and
	// canonical arguments, in journal order; each is used once.
	answers map[string][]JournaledObservation
	// round counts the catalog's reads: one a round.
	round                 int
	replayed, notReplayed int
	// inputLen is the length of the replay's input, which its transcript
	// begins with.
	inputLen int
}

func newReplayer(rec *recorded) *replayer {
	rp := &replayer{rec: rec, answers: map[string][]JournaledObservation{}}
	for r := 1; r <= rec.rounds; r++ {
		resp, obs := rec.rp.model[r], rec.rp.observed[r]
		if resp == nil {
			continue
		}
		calls := resp.Message.ToolCalls
		for i := 0; i < len(obs) && i < len(calls); i++ {
			if args, ok := canonicalArgs(calls[i].Function.Arguments); ok {
				k := replayKey(calls[i].Function.Name, args)
				rp.answers[k] = append(rp.answers[k], obs[i])
			}
		}
	}
	return rp
}

var (
	_ control = (*replayer)(nil)
	_ Catalog = (*replayer)(nil)
)

// run runs msgs under the replay: with the recorded run's limits, and
// maxRounds (when not 0) as its last round.
func (rp *replayer) run(ctx context.Context, cfg Config, model Model, msgs []Message, maxRounds int) (*Result, error) {
	cfg = cfg.withDefaults()
	if p := rp.rec.policy; p != nil {
		cfg = p.tighten(cfg)
	}
	cfg.RequireApproval, cfg.DryRun = nil, false // no call reaches the gate or the fleet
	if maxRounds > 0 {
		cfg.MaxRounds = maxRounds
	}
	r, err := New(cfg, model, rp, noFleet{}, nil)
	if err != nil {
		return nil, err
	}
	fixed, _, err := repairInput(msgs)
	if err != nil {
		return nil, err
	}
	rp.inputLen = len(fixed)
	ru := r.newRun(fixed, "")
	ru.ctl, ru.given = rp, rp.rec.rp
	defer ru.closeInbox()
	return ru.execute(ctx)
}

// Tools implements [Catalog]: the tools the recorded round was offered (a
// round past the recorded ones: its last round's).
func (rp *replayer) Tools(context.Context) ([]protocol.ToolSpec, error) {
	rp.round++
	for r := min(rp.round, rp.rec.rounds); r >= 0; r-- {
		if specs, ok := rp.rec.rp.tools[r]; ok {
			return specs, nil
		}
	}
	return nil, nil
}

// beforeApprove implements [control]: every valid call is answered here,
// from the journal or not_replayed.
func (rp *replayer) beforeApprove(ru *run, _ int, calls []roundCall) {
	for i := range calls {
		c := &calls[i]
		if c.done {
			continue
		}
		k := replayKey(string(c.entry.spec.Name), c.args)
		if q := rp.answers[k]; len(q) > 0 {
			o := q[0]
			rp.answers[k] = q[1:]
			c.ans = o
			c.ans.CallKey, c.ans.DurationMS = "", 0
			ru.answer(c, o.Outcome, o.Content)
			rp.replayed++
			continue
		}
		ru.answer(c, protocol.OutcomeNotReplayed, obsNotReplayed(c.name))
		rp.notReplayed++
	}
}

func (rp *replayer) beforeDispatch(*run, int, []roundCall) {}

// replayKey is how a replay matches a call: its tool and canonical
// arguments.
func replayKey(tool string, canonical []byte) string { return tool + "\x00" + string(canonical) }

// canonicalArgs returns a call's arguments as validate canonicalises them,
// false when they are not a JSON object.
func canonicalArgs(raw string) ([]byte, bool) {
	if strings.TrimSpace(raw) == "" {
		raw = "{}"
	}
	obj, err := schema.ParseObject([]byte(raw))
	if err != nil {
		return nil, false
	}
	canon, err := protocol.CanonicalValue(obj)
	return canon, err == nil
}

// errReplayNoFleet is what a replay's dispatcher answers: unreachable, as
// every call is answered before it.
var errReplayNoFleet = errors.New("loop: a replay publishes nothing")

// noFleet is a replay's [Dispatcher]: it publishes nothing.
type noFleet struct{}

func (noFleet) Open(context.Context, protocol.RunID) (Inbox, error) { return nil, errReplayNoFleet }
func (noFleet) Publish(context.Context, Outgoing) error             { return errReplayNoFleet }
func (noFleet) Cancel(context.Context, protocol.Cancel) error       { return nil }

// lastLoopEntry is the last entry of entries of a kind the loop writes;
// nil when there is none.
func lastLoopEntry(entries []JournalEntry) *JournalEntry {
	for i := len(entries) - 1; i >= 0; i-- {
		switch entries[i].Kind {
		case EntryStart, EntryTools, EntryModel, EntryApprovalRequested, EntryApprovalDecided, EntryDispatched,
			EntryPublished, EntryObserved, EntryFinished, EntryParked, EntryInput:
			return &entries[i]
		}
	}
	return nil
}
