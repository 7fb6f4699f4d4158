package loop

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// A call's answer is made here, whichever phase ends it: its outcome, the
// text the model reads (a row of OutcomeTexts, written beside the method
// that sends it), what its record and the journal keep of how it ended
// (c.ans), its key's state and the Cancel owed to a worker, and its
// CallDone event. The phases decide when a call ends; this file says how.

// OutcomeText is one wording the model reads in the tool message that
// answers a call: the call's outcome, the text with its placeholders, and
// when the loop sends it.
type OutcomeText struct {
	// Outcome is the call's outcome ([protocol.Outcome]), which the
	// result's [CallRecord] and the tool message's Outcome carry.
	Outcome protocol.Outcome
	// Text is the tool message's content. <name> is the tool's name as
	// the model wrote it, at most 64 runes with quotes, backslashes and
	// anything unprintable escaped; <duration> is written like 2m, 1.5s;
	// <N> is a number; the other placeholders are described in When. A
	// part in [brackets] is there only sometimes.
	Text string
	// When says when the loop answers a call with Text.
	When string
}

// OutcomeTexts is what the model reads for each outcome: the content of
// the tool message that answers a call, one row per wording. Every text
// the loop writes is one of these (a test holds the loop to it). An
// observation never carries a tool's error message, a stack or a
// credential; a failed call names only the worker's error type.
var OutcomeTexts = []OutcomeText{
	{protocol.OutcomeOK, "<output>",
		"The tool ran and succeeded: its output, cut to MaxObservationChars (a cut output ends in protocol.TruncationMarker)."},
	{protocol.OutcomeFailed, "Tool '<name>' failed: <error type>",
		"The tool ran and failed; <error type> is the worker's error type (a Go type or an exit status, at most 64 printable ASCII bytes), never the error's message."},
	{protocol.OutcomeFailed, "Tool '<name>' failed: dispatch error (the call was not sent and did not run)",
		"The call could not be published to the fleet."},
	{protocol.OutcomeInvalidArguments, "Tool '<name>' argument error: <message>",
		"The arguments are not a JSON object or fail the tool's JSON Schema (checked by the coordinator, then by the worker); <message> is the validator's."},
	{protocol.OutcomeUnknownTool, "Error: Unknown tool '<name>'",
		"No tool of that name is in the catalog (or the worker does not serve it)."},
	{protocol.OutcomeTimeout, "Tool '<name>' timed out after <duration>",
		"No answer came before the call's deadline (its timeout) plus the grace."},
	{protocol.OutcomeTimeout, "Tool '<name>' timed out after <duration> before any worker started it: it did not run",
		"A non-idempotent call still unanswered at its deadline was withdrawn before any worker claimed it."},
	{protocol.OutcomeRejected, "Tool call rejected: this round requested <N> tool calls, exceeding the limit of <N>. Retry with fewer calls.[ <N> further calls were dropped unread and are not in the transcript.]",
		"A call over MaxToolCallsPerRound (the second sentence once, when calls past MaxToolCallsKept were dropped)."},
	{protocol.OutcomeRejected, "Tool call rejected: the run's tool-call budget allows <N> more calls; this round requested <N>. The run ends here.[ <N> further calls were dropped unread and are not in the transcript.]",
		"A call past what the run's tool-call budget (Budget.ToolCalls) allows; the run ends after this round."},
	{protocol.OutcomeRejected, "Tool call rejected: call id '<id>' repeats an earlier call in this round.",
		"The call's id repeats an earlier call of the same assistant message: it is the same call asked twice, answered once and never run."},
	{protocol.OutcomeDenied, "Tool '<name>' blocked by approval[: <reason>]",
		"A human denied the call; <reason> is the decision's reason."},
	{protocol.OutcomeDenied, "Tool '<name>' blocked by approval: approval unavailable (no decision was made)",
		"The approval gate failed (it could not publish, subscribe or wait): fail closed, the call did not run."},
	{protocol.OutcomeDenied, "Tool '<name>' blocked by approval: the worker found no valid approval and did not run it",
		"The worker checked the call's approval proof and refused it."},
	{protocol.OutcomeDenied, "Tool '<name>' blocked by approval: the approval is valid, but the worker could not record that it runs the call, so it did not run it",
		"The worker could not write the approved call's execution record (ErrorTypeRecordUnwritten): fail closed, the call did not run."},
	{protocol.OutcomeApprovalExpired, "Tool '<name>' blocked by approval: no decision within <duration>",
		"No valid decision came before the approval request's deadline (ApprovalTimeout)."},
	{protocol.OutcomeCancelled, "Tool '<name>' was cancelled",
		"The run was cancelled (its context ended) before the call was answered."},
	{protocol.OutcomeUnknown, "Tool '<name>' outcome unknown: a worker started this call and stopped answering, so it may or may not have taken effect. Check before calling it again.",
		"A worker started a non-idempotent call and no answer came: it is never retried blindly."},
	{protocol.OutcomeUnknown, "Tool '<name>' outcome unknown: the run stopped before this call was answered, so it may or may not have taken effect; check before calling it again.",
		"A call of the input transcript has no tool message: an earlier run stopped before answering it."},
	{protocol.OutcomeRateLimited, "Tool '<name>' rate limited: the tool's rate limit was reached and this call did not run. Try again in <N>s or later.",
		"The tool's fleet-wide rate limit did not let the call start; <N> is the wait in whole seconds, at least 1."},
	{protocol.OutcomeSimulated, "Tool '<name>' was not run (dry run): it would have run with arguments {<keys>} (digest <digest>).",
		"A dry run's call of a tool not declared read-only: validated, gated and approved as usual, never published; <keys> are its argument keys, <digest> the digest of its canonical arguments."},
	{protocol.OutcomeNotReplayed, "Tool '<name>' was not run (replay): the recorded run has no result for this call with these arguments.",
		"A replay's call that the recorded run never made with this tool and these arguments: nothing ran."},
	{protocol.OutcomeInterrupted, "Tool '<name>' was not run: the user interrupted this round with a new message.",
		"The run's client interrupted the round (input mode interrupt) before any worker took the call: it was never published, or (not idempotent) withdrawn before a worker claimed it."},
}

// answer closes a call with its outcome and observation (a later answer
// replaces them); the CallObserver hears of the first. Each way a call
// ends, below, comes through here.
func (ru *run) answer(c *roundCall, o protocol.Outcome, obs string) {
	first := !c.done
	c.done, c.ans.Outcome, c.ans.Content, c.end = true, o, obs, ru.cfg.Now()
	if first {
		ru.callEvent(c.round, c, CallDone)
	}
}

// closeKey marks how a published call's key was closed, so that a result
// that comes later is dropped as late or as a duplicate.
func (ru *run) closeKey(key protocol.CallKey, st keyState) {
	if _, ok := ru.keys[key]; ok {
		ru.keys[key] = st
	}
}

// Cancel reasons sent to workers (c.cancelWhy).
const (
	cancelTimeout   = "timeout"
	cancelUnknown   = "outcome_unknown"
	cancelRun       = "run_cancelled"
	cancelUnpublish = "publish_interrupted"
)

// The observation texts below are each a row of OutcomeTexts. Each names
// the tool as the model wrote it, clipped and escaped by [clipName]. Texts
// that match ExecutionKit keep its wording.

// Validation (validate.go).

// answerRepeat answers a call whose id repeats an earlier call of the same
// assistant message: the same call asked twice, never run.
func (ru *run) answerRepeat(c *roundCall) {
	ru.answer(c, protocol.OutcomeRejected, obsRepeatRejected(c.repeatOf))
}

// obsRepeatRejected answers a call whose id repeats an earlier call of the
// same assistant message.
func obsRepeatRejected(id string) string {
	return "Tool call rejected: call id '" + clipName(id) + "' repeats an earlier call in this round."
}

// answerUnknownTool answers a call of a tool the catalog (or the worker)
// does not have.
func (ru *run) answerUnknownTool(c *roundCall) {
	ru.answer(c, protocol.OutcomeUnknownTool, obsUnknownTool(c.name))
}

func obsUnknownTool(name string) string { return "Error: Unknown tool '" + clipName(name) + "'" }

// answerArgumentError answers a call whose arguments the coordinator's
// validator refused; msg is the validator's message.
func (ru *run) answerArgumentError(c *roundCall, msg string) {
	ru.answer(c, protocol.OutcomeInvalidArguments, obsArgumentError(c.name, msg))
}

func obsArgumentError(name, msg string) string {
	return "Tool '" + clipName(name) + "' argument error: " + msg
}

// The calls past the round's cap (validate.go counts them, record.go
// answers them).

// capRejected is the observation of a call past the round's limit.
func (ru *run) capRejected(requested, limit int) string {
	if ru.b.cut {
		return obsBudgetRejected(requested, limit)
	}
	return obsCapRejected(requested, limit)
}

// obsCapRejected answers a call over the per-round cap.
func obsCapRejected(requested, limit int) string {
	return fmt.Sprintf("Tool call rejected: this round requested %d tool calls, exceeding the limit of %d. Retry with fewer calls.", requested, limit)
}

// obsBudgetRejected answers a call past what the run's tool-call budget
// allows: the run ends after this round.
func obsBudgetRejected(requested, limit int) string {
	return fmt.Sprintf("Tool call rejected: the run's tool-call budget allows %d more calls; this round requested %d. The run ends here.", limit, requested)
}

// obsDropped tells the model, once, that calls past the kept ceiling were
// dropped from the transcript.
func obsDropped(n int) string {
	return fmt.Sprintf(" %d further calls were dropped unread and are not in the transcript.", n)
}

// The gate (approve.go). Anything but a timely, explicit approval keeps
// the call from running; only an explicit "no" is reported as a denial
// with a reason, never a timeout or a gate failure.

// applyDecision maps a gate answer onto the call: an approval keeps its
// proof for the publish, anything else answers it.
func (ru *run) applyDecision(ctx context.Context, c *roundCall, a approval, timeout time.Duration) {
	switch {
	case ctx.Err() != nil:
		ru.answerCancelled(c)
	case a.expired || (a.err == nil && a.d.Expired):
		ru.answerApprovalExpired(c, "expired", timeout)
	case a.err != nil:
		ru.answerApprovalUnavailable(c, "gate_error:"+errType(a.err))
	case a.d.Approved:
		c.ans.GateResult = "approved"
		c.proof = a.d.Proof
	default:
		ru.answerDenied(c, a.d.Reason)
	}
}

// answerDenied answers a call a human denied, with the decision's reason.
func (ru *run) answerDenied(c *roundCall, reason string) {
	c.ans.GateResult = "denied"
	reason, _ = protocol.Truncate(reason, protocol.MaxReasonLen)
	ru.answer(c, protocol.OutcomeDenied, obsDenied(c.name, reason))
}

func obsDenied(name, reason string) string {
	if reason == "" {
		return "Tool '" + clipName(name) + "' blocked by approval"
	}
	return "Tool '" + clipName(name) + "' blocked by approval: " + reason
}

// answerApprovalExpired answers a call no valid decision came for within
// timeout; why is how the gate's wait ended, for the record.
func (ru *run) answerApprovalExpired(c *roundCall, why string, timeout time.Duration) {
	c.ans.GateResult = why
	ru.answer(c, protocol.OutcomeApprovalExpired, obsApprovalExpired(c.name, timeout))
}

func obsApprovalExpired(name string, d time.Duration) string {
	return "Tool '" + clipName(name) + "' blocked by approval: no decision within " + fmtDuration(d)
}

// answerApprovalUnavailable answers a call the gate could not decide
// (why: how it failed, for the record): fail closed.
func (ru *run) answerApprovalUnavailable(c *roundCall, why string) {
	c.ans.GateResult = why
	ru.answer(c, protocol.OutcomeDenied, obsApprovalUnavailable(c.name))
}

func obsApprovalUnavailable(name string) string {
	return "Tool '" + clipName(name) + "' blocked by approval: approval unavailable (no decision was made)"
}

// Run control (control.go, control_replay.go).

// answerSimulated answers a dry run's call of a tool not declared
// read-only, instead of publishing it.
func (ru *run) answerSimulated(c *roundCall) {
	ru.answer(c, protocol.OutcomeSimulated, obsSimulated(c.name, canonicalArgKeys(c.args), protocol.CanonicalArgsDigest(c.args)))
}

// obsSimulated answers a dry run's call of a tool not declared read-only:
// it did not run; the model is told what would have run — the argument
// keys (clipped, as logs give them) and the digest, never a value.
func obsSimulated(name string, keys []string, digest string) string {
	return "Tool '" + clipName(name) + "' was not run (dry run): it would have run with arguments {" +
		strings.Join(keys, ", ") + "} (digest " + digest + ")."
}

// answerNotReplayed answers a replay's call that the recorded run never
// made with these arguments.
func (ru *run) answerNotReplayed(c *roundCall) {
	ru.answer(c, protocol.OutcomeNotReplayed, obsNotReplayed(c.name))
}

// obsNotReplayed answers a replay's call that the recorded run never made
// with these arguments: nothing ran.
func obsNotReplayed(name string) string {
	return "Tool '" + clipName(name) + "' was not run (replay): the recorded run has no result for this call with these arguments."
}

// Dispatch (dispatch.go).

// failDispatch answers a call whose publish failed. If the run was being
// cancelled the call may have gone out, so a Cancel follows it.
func (ru *run) failDispatch(ctx context.Context, c *roundCall) {
	ru.closeKey(c.key, keyBySynth)
	if ctx.Err() != nil {
		c.cancelWhy = cancelUnpublish
		ru.answerCancelled(c)
		return
	}
	c.ans.ErrorType = "dispatch"
	ru.answer(c, protocol.OutcomeFailed, obsDispatchFailed(c.name))
}

// ErrorTypeRecordUnwritten is the error type of a worker's denied result
// for a call whose approval is valid but whose execution record the worker
// could not write (the claims stream refused it or could not be reached):
// the call did not run, and the model reads that apart from a missing or
// forged approval.
const ErrorTypeRecordUnwritten = "approval:record_unwritten"

func obsRecordUnwritten(name string) string {
	return "Tool '" + clipName(name) + "' blocked by approval: the approval is valid, but the worker could not record that it runs the call, so it did not run it"
}

func obsDispatchFailed(name string) string {
	return "Tool '" + clipName(name) + "' failed: dispatch error (the call was not sent and did not run)"
}

// Gathering (gather.go, input.go).

// fromResult answers a call from its worker's result (docs/design.md §4,
// step 7), with the observation of its outcome: one case for each outcome
// protocol's table says a worker may report (TestWorkerOutcomesAnswered).
func (ru *run) fromResult(s *roundCall, res protocol.Result) {
	if res.Worker != "" {
		s.ans.Worker = clipName(res.Worker)
	}
	if res.Attempt != 0 {
		s.ans.Attempt = res.Attempt
	}
	switch res.Outcome {
	case protocol.OutcomeOK:
		s.ans.Truncated = res.Truncated
		ru.answer(s, protocol.OutcomeOK, res.Output)
	case protocol.OutcomeFailed:
		s.ans.ErrorType = cleanErrorType(res.ErrorType)
		ru.answer(s, protocol.OutcomeFailed, obsFailed(s.name, res.ErrorType))
	case protocol.OutcomeInvalidArguments:
		ru.answerArgumentError(s, res.Output)
	case protocol.OutcomeUnknownTool:
		ru.answerUnknownTool(s)
	case protocol.OutcomeTimeout:
		ru.answer(s, protocol.OutcomeTimeout, obsTimeout(s.name, s.timeout))
	case protocol.OutcomeDenied:
		if res.ErrorType == ErrorTypeRecordUnwritten {
			s.ans.GateResult = "worker_unrecorded"
			ru.answer(s, protocol.OutcomeDenied, obsRecordUnwritten(s.name))
			break
		}
		s.ans.GateResult = "worker_refused"
		ru.answer(s, protocol.OutcomeDenied, obsWorkerRefused(s.name))
	case protocol.OutcomeRateLimited:
		ru.answer(s, protocol.OutcomeRateLimited, obsRateLimited(s.name, time.Duration(res.RetryAfterMS)*time.Millisecond))
	case protocol.OutcomeCancelled:
		ru.answerCancelled(s)
	default: // not a worker's outcome: handle drops those
		ru.answer(s, protocol.OutcomeFailed, obsFailed(s.name, "unexpected_outcome"))
	}
}

func obsFailed(name, errorType string) string {
	return "Tool '" + clipName(name) + "' failed: " + cleanErrorType(errorType)
}

func obsWorkerRefused(name string) string {
	return "Tool '" + clipName(name) + "' blocked by approval: the worker found no valid approval and did not run it"
}

// obsRateLimited answers a call the tool's rate limit did not let start:
// it did not run, and the model is told when to try again (rounded up to a
// whole second, at least 1s).
func obsRateLimited(name string, retryAfter time.Duration) string {
	secs := max(int64((retryAfter+time.Second-1)/time.Second), 1)
	return "Tool '" + clipName(name) + "' rate limited: the tool's rate limit was reached and this call did not run. Try again in " +
		strconv.FormatInt(secs, 10) + "s or later."
}

// expire answers a call whose deadline and grace passed without a result.
func (ru *run) expire(s *roundCall) {
	ru.closeKey(s.key, keyBySynth)
	if s.started && !s.entry.spec.Idempotent {
		s.cancelWhy = cancelUnknown
		ru.answer(s, protocol.OutcomeUnknown, obsOutcomeUnknown(s.name))
		return
	}
	s.cancelWhy = cancelTimeout
	ru.answer(s, protocol.OutcomeTimeout, obsTimeout(s.name, s.timeout))
}

func obsTimeout(name string, d time.Duration) string {
	return "Tool '" + clipName(name) + "' timed out after " + fmtDuration(d)
}

func obsOutcomeUnknown(name string) string {
	return "Tool '" + clipName(name) + "' outcome unknown: a worker started this call and stopped answering, so it may or may not have taken effect. Check before calling it again."
}

// answerWithdrawn answers a call withdrawn at its deadline before any
// worker claimed it: it never runs.
func (ru *run) answerWithdrawn(s *roundCall) {
	ru.closeKey(s.key, keyBySynth)
	ru.answer(s, protocol.OutcomeTimeout, obsWithdrawn(s.name, s.timeout))
}

func obsWithdrawn(name string, d time.Duration) string {
	return "Tool '" + clipName(name) + "' timed out after " + fmtDuration(d) + " before any worker started it: it did not run"
}

// answerInterrupted answers a call the run's client interrupted before
// any worker took it: never published, or withdrawn.
func (ru *run) answerInterrupted(c *roundCall) {
	ru.answer(c, protocol.OutcomeInterrupted, obsInterrupted(c.name))
}

// obsInterrupted answers a call withdrawn, or never published, because
// the run's client interrupted its round.
func obsInterrupted(name string) string {
	return "Tool '" + clipName(name) + "' was not run: the user interrupted this round with a new message."
}

// answerRunCancelled answers a published call still out when the run's
// context ended: its key is closed and a Cancel follows it.
func (ru *run) answerRunCancelled(s *roundCall) {
	s.cancelWhy = cancelRun
	ru.closeKey(s.key, keyBySynth)
	ru.answerCancelled(s)
}

// answerCancelled answers a call the run's cancellation reached before it
// was answered.
func (ru *run) answerCancelled(c *roundCall) {
	ru.answer(c, protocol.OutcomeCancelled, obsCancelled(c.name))
}

func obsCancelled(name string) string { return "Tool '" + clipName(name) + "' was cancelled" }

// answerOpen answers cancelled every call still open: unreachable, but
// no id is ever left open.
func (ru *run) answerOpen(calls []roundCall) {
	for i := range calls {
		if !calls[i].done {
			ru.answerCancelled(&calls[i])
		}
	}
}

// The input transcript (runner.go).

// obsInputUnanswered answers a call of the input transcript that has no
// tool message: an earlier run stopped (crashed) before answering it, so
// whether it ran is not known. Never "cancelled": that word makes models
// re-run side effects.
func obsInputUnanswered(name string) string {
	return "Tool '" + clipName(name) + "' outcome unknown: the run stopped before this call was answered, so it may or may not have taken effect; check before calling it again."
}

// What the model or a worker wrote, made safe to quote in these texts, in
// records and in log lines.

// maxNameRunes bounds a model-written name or id quoted in an observation
// or a log line.
const maxNameRunes = 64

// clipName makes model-written text safe to quote: at most 64 runes (then
// "…"), with non-printable runes, invalid UTF-8, quotes and backslashes
// escaped. A valid tool name comes back unchanged.
func clipName(s string) string {
	if validToolName(s) {
		return s
	}
	var b strings.Builder
	n := 0
	for i := 0; i < len(s); {
		if n == maxNameRunes {
			b.WriteString("…")
			break
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\'' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case unicode.IsPrint(r):
			b.WriteRune(r)
		default:
			q := strconv.QuoteRuneToASCII(r) // 'ሴ' → '\u1234'
			b.WriteString(q[1 : len(q)-1])
		}
		i += size
		n++
	}
	return b.String()
}

// validToolName reports whether name may be a tool's name (and so a subject
// token). The length check keeps a huge model-written name away from the
// regular expression.
func validToolName(name string) bool {
	return len(name) <= 64 && protocol.ValidToken(name)
}

// quoteClipped is clipName for values in errors and logs.
func quoteClipped(s string) string { return "'" + clipName(s) + "'" }

// cleanErrorType bounds a worker-reported error type, which is wire data:
// printable ASCII only, at most 64 bytes, "error" when empty.
func cleanErrorType(s string) string {
	if s == "" {
		return "error"
	}
	var b strings.Builder
	for i := 0; i < len(s) && b.Len() < 64; i++ {
		c := s[i]
		if c >= 0x20 && c < 0x7f {
			b.WriteByte(c)
		} else {
			b.WriteByte('?')
		}
	}
	return b.String()
}

// fmtDuration prints a duration without trailing zero units: 2m, 1h30m,
// 50ms, 1.5s.
func fmtDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
