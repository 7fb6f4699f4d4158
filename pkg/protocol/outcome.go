package protocol

// Outcome is the typed result of one tool call. The vocabulary is
// append-only: codes are never renamed or reused.
type Outcome string

// The outcomes of a tool call.
const (
	// OutcomeOK means the tool ran and returned output.
	OutcomeOK Outcome = "ok"
	// OutcomeFailed means the tool ran and returned an error or panicked.
	OutcomeFailed Outcome = "failed"
	// OutcomeInvalidArguments means the arguments were not a JSON object or
	// failed the tool's schema; the tool did not run.
	OutcomeInvalidArguments Outcome = "invalid_arguments"
	// OutcomeUnknownTool means no tool of that name is served; nothing ran.
	OutcomeUnknownTool Outcome = "unknown_tool"
	// OutcomeTimeout means no result arrived before the call's deadline.
	OutcomeTimeout Outcome = "timeout"
	// OutcomeRejected means the call was over the per-round cap or repeated an
	// earlier call id; it did not run.
	OutcomeRejected Outcome = "rejected"
	// OutcomeDenied means the approval gate said no, or could not be asked;
	// the call did not run.
	OutcomeDenied Outcome = "denied"
	// OutcomeApprovalExpired means no decision arrived in time; the call did
	// not run. It is never attributed to a human.
	OutcomeApprovalExpired Outcome = "approval_expired"
	// OutcomeCancelled means the run was cancelled before the call finished.
	OutcomeCancelled Outcome = "cancelled"
	// OutcomeUnknown means a worker started the call and then stopped
	// answering: the call may or may not have taken effect. Non-idempotent
	// calls are never retried, so the model must check before retrying.
	OutcomeUnknown Outcome = "outcome_unknown"
	// OutcomeRateLimited means the tool's fleet-wide rate limit let the call
	// not start soon enough; it did not run. The result's RetryAfterMS says
	// when the limit allows a call again.
	OutcomeRateLimited Outcome = "rate_limited"
	// OutcomeNotReplayed means a replay of a run (run control) met a call
	// its journal cannot answer: the run never made it with those
	// arguments, so the replay answers it without running anything.
	OutcomeNotReplayed Outcome = "not_replayed"
	// OutcomeSimulated means a dry run answered the call with what would
	// have run (tool, argument keys, digest) instead of running it: its
	// tool is not declared read-only.
	OutcomeSimulated Outcome = "simulated"
	// OutcomeInterrupted means the run's client interrupted the round
	// with a new message (run control) before any worker took the call:
	// it was withdrawn, or never published, and did not run.
	OutcomeInterrupted Outcome = "interrupted"
)

// outcomeSpec is one row of the outcome table.
type outcomeSpec struct {
	outcome Outcome
	// byWorker: a worker may report it in a Result. The others are the
	// coordinator's own, and a result carrying one is dropped.
	byWorker bool
}

// outcomeTable is the one table of outcomes, in the order they were added.
// Everything else is derived from it or tested against it: [Outcomes],
// [Outcome.Valid], [Outcome.ByWorker] (the results the loop takes), the
// metrics' outcome label (any valid outcome, as itself), the loop's
// observation of a worker's result (loop.TestWorkerOutcomesAnswered) and
// docs/result.schema.json's enums (loop.TestResultSchemaEnums). Adding an
// outcome is a constant above, a row here and its producer; a place
// forgotten fails one of those tests.
var outcomeTable = []outcomeSpec{
	{OutcomeOK, true},
	{OutcomeFailed, true},
	{OutcomeInvalidArguments, true},
	{OutcomeUnknownTool, true},
	{OutcomeTimeout, true},
	{OutcomeRejected, false},
	{OutcomeDenied, true},
	{OutcomeApprovalExpired, false},
	{OutcomeCancelled, true},
	{OutcomeUnknown, false},
	{OutcomeRateLimited, true},
	{OutcomeNotReplayed, false},
	{OutcomeSimulated, false},
	{OutcomeInterrupted, false},
}

// Outcomes lists every outcome in the order they were added.
var Outcomes = func() []Outcome {
	out := make([]Outcome, len(outcomeTable))
	for i, row := range outcomeTable {
		out[i] = row.outcome
	}
	return out
}()

// Valid reports whether o is one of [Outcomes].
func (o Outcome) Valid() bool {
	_, ok := o.spec()
	return ok
}

// ByWorker reports whether a worker may report o in a [Result]; the other
// outcomes are the coordinator's own.
func (o Outcome) ByWorker() bool {
	row, ok := o.spec()
	return ok && row.byWorker
}

func (o Outcome) spec() (outcomeSpec, bool) {
	for _, row := range outcomeTable {
		if row.outcome == o {
			return row, true
		}
	}
	return outcomeSpec{}, false
}
