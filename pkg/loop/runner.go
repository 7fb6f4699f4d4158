package loop

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolfleet/toolfleet/pkg/protocol"
	"github.com/toolfleet/toolfleet/pkg/schema"
)

// ErrInvalidInput is wrapped by every error about a run's input (an empty
// prompt, an invalid transcript); such runs return a nil Result.
var ErrInvalidInput = errors.New("invalid run input")

// ErrTranscriptTooLarge ends a run whose transcript grew past
// Config.MaxTranscriptBytes.
var ErrTranscriptTooLarge = errors.New("loop: the transcript is over its byte bound (max_transcript_bytes)")

// ErrRunBudget ends a run that ran past Config.MaxRunDuration.
var ErrRunBudget = errors.New("loop: the run is over its wall-clock budget (max_run_duration)")

// Runner runs the ReAct loop. It is safe for concurrent use: each Run has
// its own state, and runs share only the compiled-schema cache.
type Runner struct {
	cfg     Config
	model   Model
	catalog Catalog
	disp    Dispatcher
	gate    Gate
	// approvals is which calls need approval under cfg.RequireApproval.
	approvals approvalSet
	schemas   schemaCache
	// missing holds the RequireApproval names already reported missing
	// from the catalog, so each is warned about once.
	missing sync.Map
}

// New returns a Runner after validating cfg (the error is a [*ConfigError]).
// model, catalog and d are required. gate may be nil: every call that needs
// approval is then denied, as "approval unavailable" — the loop fails
// closed.
func New(cfg Config, model Model, catalog Catalog, d Dispatcher, gate Gate) (*Runner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	switch {
	case model == nil:
		return nil, &ConfigError{Field: "model", Value: "nil", Rule: "must be set"}
	case catalog == nil:
		return nil, &ConfigError{Field: "catalog", Value: "nil", Rule: "must be set"}
	case d == nil:
		return nil, &ConfigError{Field: "dispatcher", Value: "nil", Rule: "must be set"}
	}
	cfg = cfg.withDefaults()
	r := &Runner{cfg: cfg, model: model, catalog: catalog, disp: d, gate: gate, approvals: newApprovalSet(cfg.RequireApproval)}
	r.schemas.m = map[string]*schemaEntry{}
	return r, nil
}

// Run runs the loop on a single user prompt.
func (r *Runner) Run(ctx context.Context, prompt string) (*Result, error) {
	if strings.TrimSpace(prompt) == "" {
		return nil, fmt.Errorf("loop: %w: empty prompt", ErrInvalidInput)
	}
	return r.run(ctx, []Message{{Role: "user", Content: prompt}})
}

// RunMessages runs the loop on a transcript, which it copies and never
// mutates. The transcript must be non-empty, use the roles system, user,
// assistant and tool, and give each tool message right after the assistant
// message whose call it answers, at most one per call id. Before the first
// model call the copy is repaired: the tool messages after an assistant
// message are put in request order, and a call left unanswered (by an
// earlier run that crashed) is answered outcome_unknown — "may or may not
// have taken effect; check before calling it again", never "cancelled".
// Transcripts in a provider's own format are converted first by the
// provider packages (transcript.DecodeAnthropic,
// transcript.DecodeResponses).
//
// The returned Result is nil only when the input is refused. Otherwise it is
// complete — every tool call id answered — whatever happened: a model or
// catalog error (reason "error", and the error is returned too), MaxRounds
// exhausted (reason "max_rounds", nil error) or ctx ended (reason
// "cancelled", nil error; open calls are answered "cancelled" and cancels
// are published with a fresh context bounded by CancelTimeout).
func (r *Runner) RunMessages(ctx context.Context, msgs []Message) (*Result, error) {
	fixed, unanswered, err := repairInput(msgs)
	if err != nil {
		return nil, err
	}
	if unanswered > 0 {
		r.cfg.Logger.Warn().Str(logKeyEvent, evInputUnanswered).Int(logKeyCount, unanswered).Send()
	}
	return r.run(ctx, fixed)
}

// keyState records how a call key of the run was closed, so a later result
// for it is logged as a duplicate or as late.
type keyState uint8

const (
	keyOpen keyState = iota
	keyByResult
	keyBySynth
)

// run is the state of one Run.
type run struct {
	r   *Runner
	cfg *Config
	// approvals is which calls need approval: the runner's, or for a
	// resumed durable run at least its journaled policy's.
	approvals approvalSet
	log       zerolog.Logger
	id        protocol.RunID
	res       *Result
	msgs      []Message
	inbox     Inbox
	// progress names the calls of the run's progress reports.
	progress progressCalls
	// ids holds every call id of the transcript, so ids stay unique.
	ids map[string]struct{}
	// keys holds every call key this run published.
	keys map[protocol.CallKey]keyState
	// skipped remembers catalog entries already logged as unusable.
	skipped map[string]bool
	// j is the run's journal: a durable run's, or noJournal.
	j runJournal
	// tools is what the catalog offered in the last round, journaled in
	// the last tools entry: a round offered the same is not journaled
	// again.
	tools []protocol.ToolSpec
	// early holds results a durable run read before it reached their call.
	early map[protocol.CallKey]protocol.Result
	// resumed is the round being resumed, whose calls are the only ones
	// an early result is kept for.
	resumed *resumedRound
	// b is the run's spending against Config.Budget (budget.go).
	b budgetState
	// sum is the last summary of the run's window (window.go).
	sum summaryState
	// tr is the run's tracer, from its span's start (tracing.go).
	tr trace.Tracer
	// handoff is a durable run's [Durable.Handoff]; nil for a plain run.
	handoff <-chan struct{}
	// secret is a durable run's secret (EntryStart), from which its call
	// keys and replacement call ids are derived; "" for a plain run.
	secret string
	// startedNotices: the run's context asks for a started notice of
	// every call ([WithStartedNotices]).
	startedNotices bool
	// ctl answers calls in place of the fleet: a replay's, a dry run's,
	// or noControl (control.go).
	ctl control
	// park and parkData are a durable run's [Durable.Park] and
	// [Durable.ParkData].
	park     func(error) string
	parkData []byte
	// input is a durable run's [Durable.Input]; taken holds the inputs
	// journaled while a round was in flight, added after its tool
	// messages; interrupted: one of them interrupted the round
	// (input.go).
	input       <-chan Input
	taken       []Input
	interrupted bool
	// given is a replay's or a fork's recorded run, whose journaled
	// inputs it puts back where they were (input.go).
	given *replay
}

func (r *Runner) run(ctx context.Context, msgs []Message) (*Result, error) {
	ru := r.newRun(msgs, "")
	defer ru.closeInbox()
	r.cfg.Observer.RunStarted()
	return ru.execute(ctx)
}

// execute runs the loop within the run's wall-clock budget, in the run's
// span.
func (ru *run) execute(ctx context.Context) (*Result, error) {
	ru.startedNotices = wantsStartedNotices(ctx)
	ctx, cancel := context.WithTimeoutCause(ctx, ru.cfg.MaxRunDuration, ErrRunBudget)
	defer cancel()
	ctx, endRun := ru.startRunSpan(ctx)
	res, err := ru.loop(ctx)
	endRun(res, err)
	return res, err
}

// newRun returns a run's state; an empty id is drawn from Config.NewID.
func (r *Runner) newRun(msgs []Message, id protocol.RunID) *run {
	ru := &run{r: r, cfg: &r.cfg, approvals: r.approvals, msgs: msgs, ids: map[string]struct{}{}, j: noJournal{},
		keys: map[protocol.CallKey]keyState{}, skipped: map[string]bool{}, early: map[protocol.CallKey]protocol.Result{}}
	ru.id, ru.ctl = id, controlOf(ru.cfg)
	if ru.id == "" {
		ru.id = token[protocol.RunID](ru.cfg.NewID, nil)
	}
	ru.log = r.cfg.Logger.With().Str(logKeyRun, string(ru.id)).Logger()
	ru.res = newResult(ru.id)
	for _, m := range msgs {
		for _, tc := range m.ToolCalls {
			ru.ids[tc.ID] = struct{}{}
		}
	}
	return ru
}

// ended finishes a run whose context ended: cancelled, or over its
// wall-clock budget.
func (ru *run) ended(ctx context.Context) (*Result, error) {
	if errors.Is(context.Cause(ctx), ErrRunBudget) {
		return ru.finish(TerminationError, "", ErrRunBudget)
	}
	return ru.finish(TerminationCancelled, "", nil)
}

// transcriptBytes is the size of the transcript: contents, ids, names and
// arguments.
func (ru *run) transcriptBytes() int {
	n := 0
	for i := range ru.msgs {
		m := &ru.msgs[i]
		n += len(m.Role) + len(m.Content) + len(m.ToolCallID)
		for j := range m.ToolCalls {
			tc := &m.ToolCalls[j]
			n += len(tc.ID) + len(tc.Type) + len(tc.Function.Name) + len(tc.Function.Arguments)
		}
	}
	return n
}

func (ru *run) loop(runCtx context.Context) (*Result, error) {
	endRound := func() {}
	defer func() { endRound() }()
	for round := 1; round <= ru.cfg.MaxRounds; round++ {
		endRound()
		ctx, end := ru.startRoundSpan(runCtx, round)
		endRound = end
		if err := ru.j.checkpoint(); err != nil {
			return nil, err
		}
		if ctx.Err() != nil {
			return ru.ended(ctx)
		}
		if !ru.takeInputs(ctx, round-1) {
			return nil, ru.j.checkpoint()
		}
		ru.interrupted = false
		if n := ru.transcriptBytes(); n > ru.cfg.MaxTranscriptBytes {
			ru.log.Warn().Str(logKeyEvent, evTranscriptTooLarge).Int(logKeyRound, round).
				Int(logKeyCount, n).Int(logKeyLimit, ru.cfg.MaxTranscriptBytes).Send()
			return ru.finish(TerminationError, "", ErrTranscriptTooLarge)
		}
		if f := ru.j.replay().end(); f != nil && ru.j.replay().response(round) == nil {
			// The run ended before this round's model answered (cancelled,
			// or a model failure): it is not asked again.
			return ru.finish(f.Termination, f.Answer, nil)
		}
		tools, defs, err := ru.roundTools(ctx, round)
		if err := ru.j.checkpoint(); err != nil {
			return nil, err
		}
		if err != nil {
			if ctx.Err() != nil {
				return ru.ended(ctx)
			}
			return ru.finish(TerminationError, "", fmt.Errorf("loop: reading the tool catalog: %w", err))
		}
		if rep := ru.budgetBeforeModel(round, defs); rep != nil {
			return ru.finishBudget(rep)
		}
		resp, err := ru.roundResponse(ctx, round, defs)
		if err := ru.j.checkpoint(); err != nil {
			return nil, err
		}
		if err != nil {
			if ctx.Err() != nil {
				return ru.ended(ctx)
			}
			if reason := ru.parkReason(err); reason != "" {
				return ru.parked(round, reason)
			}
			return ru.finish(TerminationError, "", fmt.Errorf("loop: model call in round %d: %w", round, err))
		}
		ru.res.Metadata.Rounds = round
		ru.afterResponse(resp)
		// Calls past the ceiling are never copied, stored or answered.
		calls, dropped := resp.Message.ToolCalls, 0
		if len(calls) > ru.cfg.MaxToolCallsKept {
			calls, dropped = calls[:ru.cfg.MaxToolCallsKept], len(calls)-ru.cfg.MaxToolCallsKept
		}
		msg := Message{Role: "assistant", Content: resp.Message.Content, ToolCalls: cloneToolCalls(calls)}
		resp = nil
		if len(msg.ToolCalls) == 0 {
			ru.msgs = append(ru.msgs, msg)
			return ru.finish(TerminationNatural, msg.Content, nil)
		}
		ru.round(ctx, round, msg, tools, dropped)
		if err := ru.j.checkpoint(); err != nil {
			return nil, err
		}
		if ctx.Err() != nil {
			return ru.ended(ctx)
		}
		if ru.b.cut {
			return ru.finishBudget(ru.report(BudgetToolCalls, float64(ru.cfg.Budget.ToolCalls)))
		}
	}
	return ru.finish(TerminationMaxRounds, "", nil)
}

// complete makes one model call and traces it (never its content).
func (ru *run) complete(ctx context.Context, round int, defs []ToolDef) (*Response, error) {
	req := Request{Messages: ru.window(ctx), Tools: defs}
	ru.log.Info().Str(logKeyEvent, evModelCallStart).Int(logKeyRound, round).
		Int(logKeyMessages, len(req.Messages)).Int(logKeyTools, len(defs)).Send()
	start := ru.cfg.Now()
	ru.res.Metadata.ModelCalls++
	mctx, endModel := ru.startModelSpan(ctx, round)
	resp, err := ru.r.model.Complete(mctx, req)
	if err == nil && resp == nil {
		err = errors.New("model returned no response")
	}
	endModel(resp, err)
	took := ru.cfg.Now().Sub(start)
	elapsed := ms(took)
	if err != nil {
		ru.cfg.Observer.ModelCall(took, Usage{}, err)
		ru.log.Warn().Str(logKeyEvent, evModelCallEnd).Int(logKeyRound, round).Int64(logKeyDurationMS, elapsed).
			Str(logKeyErrorType, errType(err)).Send()
		return nil, err
	}
	ru.cfg.Observer.ModelCall(took, resp.Usage, nil)
	ev := ru.log.Info().Str(logKeyEvent, evModelCallEnd).Int(logKeyRound, round).Int64(logKeyDurationMS, elapsed)
	ev.Int(logKeyPromptTokens, resp.Usage.PromptTokens).Int(logKeyCompletionTokens, resp.Usage.CompletionTokens).
		Str(logKeyFinishReason, clipName(resp.FinishReason)).Int(logKeyToolCalls, len(resp.Message.ToolCalls)).Send()
	return resp, nil
}

// roundTools is the round's catalog: journaled, or read and journaled.
func (ru *run) roundTools(ctx context.Context, round int) (map[protocol.ToolName]*toolEntry, []ToolDef, error) {
	if specs, ok := ru.j.replay().journaledTools(round); ok {
		ru.tools = specs
		m, defs := ru.usable(specs)
		return m, defs, nil
	}
	specs, err := ru.r.catalog.Tools(ctx)
	if err != nil {
		return nil, nil, err
	}
	// A round offered what the round before was offered journals no
	// tools entry: a resumed run takes the last one before it. It is
	// stored with the round's model response.
	if ru.j.replay() != nil && (ru.tools == nil || !reflect.DeepEqual(specs, ru.tools)) {
		if !ru.j.hold(ctx, JournalEntry{Kind: EntryTools, Round: round, Tools: specs}) {
			return nil, nil, ru.j.checkpoint()
		}
		ru.tools = specs
	}
	m, defs := ru.usable(specs)
	return m, defs, nil
}

// roundResponse is the round's model response: journaled, or asked for and
// journaled before it takes effect.
func (ru *run) roundResponse(ctx context.Context, round int, defs []ToolDef) (*Response, error) {
	if jr := ru.j.replay().response(round); jr != nil {
		ru.res.Metadata.ModelCalls++
		return &Response{Message: jr.Message, Usage: jr.Usage, FinishReason: jr.FinishReason}, nil
	}
	answered := ru.j.askingModel(ctx)
	resp, err := ru.complete(ctx, round, defs)
	answered()
	if err != nil {
		return nil, err
	}
	jr := &JournaledResponse{Message: resp.Message, Usage: resp.Usage, FinishReason: resp.FinishReason}
	jr.Message.ToolCalls = cloneToolCalls(jr.Message.ToolCalls)
	// Stored with the round's next entry, before any of its effects.
	if !ru.j.hold(ctx, JournalEntry{Kind: EntryModel, Round: round, Response: jr}) {
		return nil, ru.j.checkpoint()
	}
	return resp, nil
}

// parkReason is why a model failure parks the run; "" fails it.
func (ru *run) parkReason(err error) string {
	if ru.park == nil || ru.j.replay() == nil {
		return ""
	}
	return ru.park(err)
}

// parked stops a durable run whose model failed in round, journaling why
// it parked: its Result says parked, and it is resumed from the journal.
func (ru *run) parked(round int, reason string) (*Result, error) {
	if !ru.j.append(context.Background(), JournalEntry{Kind: EntryParked, Round: round, Reason: reason, Data: ru.parkData}) {
		return nil, ru.j.checkpoint()
	}
	ru.log.Warn().Str(logKeyEvent, evRunParked).Int(logKeyRound, round).Send()
	ru.res.ParkReason = reason
	return ru.finish(TerminationParked, "", nil)
}

// finish completes the Result, journaling its end first (a parked run's
// is not its end).
func (ru *run) finish(reason TerminationReason, answer string, err error) (*Result, error) {
	if rp := ru.j.replay(); rp != nil && rp.end() == nil && reason != TerminationParked {
		if !ru.j.append(context.Background(), JournalEntry{Kind: EntryFinished, Termination: reason, Answer: answer}) {
			return nil, ru.j.checkpoint()
		}
	}
	if ru.res.Budget == nil && ru.cfg.Budget.limited() {
		ru.res.Budget = ru.report("", 0)
	}
	ru.res.TerminationReason = reason
	ru.res.Answer = answer
	ru.res.DryRun = ru.cfg.DryRun
	ru.res.Messages = ru.msgs
	m := &ru.res.Metadata
	ev := ru.log.Info().Str(logKeyEvent, evRunEnd).Str(logKeyTermination, string(reason)).
		Int(logKeyRound, m.Rounds).Int(logKeyToolCalls, m.ToolCallsMade).Int(logKeyCount, m.RejectedToolCalls)
	if err != nil {
		ev.Str(logKeyErrorType, errType(errors.Unwrap(err)))
	}
	ev.Send()
	ru.cfg.Observer.RunEnded(reason)
	return ru.res, err
}

func (ru *run) closeInbox() {
	if ru.inbox == nil {
		return
	}
	if err := ru.inbox.Close(); err != nil {
		ru.log.Warn().Str(logKeyEvent, evInboxClose).Str(logKeyErrorType, errType(err)).Send()
	}
}

// toolEntry is one usable catalog entry.
type toolEntry struct {
	spec   protocol.ToolSpec
	schema *schema.Schema
	// spanName names the spans of the round's calls to the tool, made at
	// the first (toolSpanName).
	spanName string
}

// usable keeps the catalog's usable specs: valid, first of their
// name, with a schema that compiles and matches its digest. The model is
// told only about those, so a call to any other name is unknown_tool.
func (ru *run) usable(specs []protocol.ToolSpec) (map[protocol.ToolName]*toolEntry, []ToolDef) {
	m := make(map[protocol.ToolName]*toolEntry, len(specs))
	defs := make([]ToolDef, 0, len(specs))
	for _, s := range specs {
		if err := s.Validate(); err != nil {
			ru.skip(string(s.Name), "invalid_spec")
			continue
		}
		if _, dup := m[s.Name]; dup {
			ru.skip(string(s.Name), "duplicate_name")
			continue
		}
		sc, err := ru.r.schemas.get(s)
		if err != nil {
			ru.skip(string(s.Name), "unusable_schema")
			continue
		}
		m[s.Name] = &toolEntry{spec: s, schema: sc}
		defs = append(defs, ToolDef{Name: string(s.Name), Description: s.Description, Parameters: bytes.Clone(s.Parameters)})
	}
	for name := range ru.approvals.tools {
		if m[name] == nil {
			if _, seen := ru.r.missing.LoadOrStore(name, true); !seen {
				ru.log.Warn().Str(logKeyEvent, evApprovalToolMissing).Str(logKeyTool, string(name)).Send()
			}
		}
	}
	return m, defs
}

func (ru *run) skip(name, why string) {
	k := why + "\x00" + name
	if ru.skipped[k] || len(ru.skipped) > 256 {
		return
	}
	ru.skipped[k] = true
	ru.log.Warn().Str(logKeyEvent, evToolSkipped).Str(logKeyTool, clipName(name)).Str(logKeyDropReason, why).Send()
}

// maxCachedSchemas bounds the compiled-schema cache; when full it starts
// over.
const maxCachedSchemas = 1024

// schemaCache holds compiled schemas by their declared SchemaDigest, so a
// schema is compiled once, not once per round.
type schemaCache struct {
	mu sync.Mutex
	m  map[string]*schemaEntry
}

type schemaEntry struct {
	params []byte
	s      *schema.Schema
	err    error
}

// get returns s's compiled schema. A schema whose digest is not its
// declared SchemaDigest is refused: coordinator and workers must agree on
// what they validate.
func (c *schemaCache) get(s protocol.ToolSpec) (*schema.Schema, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[s.SchemaDigest]
	if ok && bytes.Equal(e.params, s.Parameters) {
		return e.s, e.err
	}
	d, err := protocol.SchemaDigest(s.Parameters)
	if err == nil && d != s.SchemaDigest {
		err = errors.New("schema digest mismatch")
	}
	if ok && err == nil && e.err == nil {
		// The same schema spelled differently: reuse the compiled one.
		return e.s, nil
	}
	var sc *schema.Schema
	if err == nil {
		sc, err = schema.Compile(string(s.Name), s.Parameters)
	}
	if len(c.m) >= maxCachedSchemas {
		clear(c.m)
	}
	c.m[s.SchemaDigest] = &schemaEntry{params: bytes.Clone(s.Parameters), s: sc, err: err}
	return sc, err
}

// repairInput refuses transcripts no model API would take and that cannot be
// repaired, and returns a copy in which the tool messages after each
// assistant message answer its calls in request order, every call once:
// those left unanswered get an outcome_unknown observation.
func repairInput(msgs []Message) ([]Message, int, error) {
	if len(msgs) == 0 {
		return nil, 0, fmt.Errorf("loop: %w: no messages", ErrInvalidInput)
	}
	bad := func(i int, format string, a ...any) error {
		return fmt.Errorf("loop: %w: message %d: %s", ErrInvalidInput, i, fmt.Sprintf(format, a...))
	}
	out := make([]Message, 0, len(msgs))
	unanswered := 0
	var calls []ToolCall           // of the last assistant message
	var answers map[string]Message // its tool messages so far
	closeCalls := func() {
		for _, tc := range calls {
			a, ok := answers[tc.ID]
			if !ok {
				a = Message{Role: "tool", ToolCallID: tc.ID, Content: obsInputUnanswered(tc.Function.Name), Outcome: protocol.OutcomeUnknown}
				unanswered++
			}
			out = append(out, a)
		}
		calls, answers = nil, nil
	}
	for i, m := range msgs {
		switch m.Role {
		case "system", "user", "assistant", "tool":
		default:
			return nil, 0, bad(i, "unknown role %s", quoteClipped(m.Role))
		}
		if m.Role == "tool" {
			found := false
			for _, tc := range calls {
				found = found || tc.ID == m.ToolCallID
			}
			if !found {
				return nil, 0, bad(i, "tool message for call id %s, which is not a call of the assistant message before it", quoteClipped(m.ToolCallID))
			}
			if _, dup := answers[m.ToolCallID]; dup {
				return nil, 0, bad(i, "a second tool message for call id %s", quoteClipped(m.ToolCallID))
			}
			answers[m.ToolCallID] = m
			continue
		}
		closeCalls()
		if len(m.ToolCalls) > 0 && m.Role != "assistant" {
			return nil, 0, bad(i, "only assistant messages carry tool calls")
		}
		seen := make(map[string]bool, len(m.ToolCalls))
		for _, tc := range m.ToolCalls {
			if tc.ID == "" || seen[tc.ID] {
				return nil, 0, bad(i, "tool call ids must be non-empty and distinct")
			}
			seen[tc.ID] = true
		}
		m.ToolCalls = cloneToolCalls(m.ToolCalls)
		out = append(out, m)
		if len(m.ToolCalls) > 0 {
			calls, answers = m.ToolCalls, map[string]Message{}
		}
	}
	closeCalls()
	return out, unanswered, nil
}

func cloneMessages(msgs []Message) []Message {
	out := make([]Message, len(msgs))
	for i, m := range msgs {
		out[i] = m
		out[i].ToolCalls = cloneToolCalls(m.ToolCalls)
	}
	return out
}

func cloneToolCalls(tcs []ToolCall) []ToolCall {
	if len(tcs) == 0 {
		return nil
	}
	return append([]ToolCall(nil), tcs...)
}
