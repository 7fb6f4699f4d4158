package loop

import (
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// TerminationReason says why a run stopped.
type TerminationReason string

// The termination reasons.
const (
	// TerminationNatural: the model answered without calling a tool.
	TerminationNatural TerminationReason = "natural"
	// TerminationMaxRounds: MaxRounds model calls all asked for tools.
	TerminationMaxRounds TerminationReason = "max_rounds"
	// TerminationCancelled: the run's context ended.
	TerminationCancelled TerminationReason = "cancelled"
	// TerminationError: the model or the catalog failed; Run also returns the
	// error.
	TerminationError TerminationReason = "error"
	// TerminationJournalLost: a journaled run's journal lost entries (see
	// RunDurable); it ended without asking, publishing or running
	// anything again.
	TerminationJournalLost TerminationReason = "journal_lost"
	// TerminationParked: a durable run's model failed and [Durable.Park]
	// parked it (ParkReason says why): it is not over, and continues from
	// its journal when resumed.
	TerminationParked TerminationReason = "parked"
)

// TerminationReasons lists every termination reason: the metrics' closed
// label vocabulary is derived from it, and docs/result.schema.json names
// the same (TestResultSchemaEnums).
var TerminationReasons = []TerminationReason{
	TerminationNatural, TerminationMaxRounds, TerminationCancelled, TerminationError,
	TerminationJournalLost, TerminationBudgetExhausted, TerminationParked,
}

// Result is the outcome of a run. Its JSON form is the coordinator's
// --output json document.
type Result struct {
	RunID             protocol.RunID    `json:"run_id"`
	Answer            string            `json:"answer"`
	TerminationReason TerminationReason `json:"termination_reason"`
	Metadata          Metadata          `json:"metadata"`
	// Calls has one entry per tool_call_id of the transcript's assistant
	// messages produced in this run, in transcript order.
	Calls []CallRecord `json:"calls"`
	// Messages is the whole transcript, input included. Every tool call in
	// it is answered by exactly one tool message, in request order.
	Messages []Message `json:"messages"`
	// Budget is what the run spent against Config.Budget, and the bound
	// that ended it; nil when the run had no budget.
	Budget *BudgetReport `json:"budget,omitempty"`
	// DryRun is true for a dry run (Config.DryRun): only tools declared
	// read-only ran, every other call was answered simulated.
	DryRun bool `json:"dry_run,omitempty"`
	// SideEffects lists the calls of this run to tools not declared
	// idempotent that ran or may have run (outcome ok, failed or
	// outcome_unknown, or cancelled after a worker started it), in
	// transcript order: what the run changed. A fork's names only its own
	// calls, never those of the transcript it was given.
	SideEffects []SideEffect `json:"side_effects,omitempty"`
	// ParkReason says why a parked run (TerminationParked) parked; empty
	// otherwise.
	ParkReason string `json:"park_reason,omitempty"`
}

// SideEffect is one call of a run that ran, or may have run, a tool not
// declared idempotent.
type SideEffect struct {
	Round   int              `json:"round"`
	CallID  string           `json:"call_id"`
	CallKey protocol.CallKey `json:"call_key"`
	Tool    string           `json:"tool"`
	Outcome protocol.Outcome `json:"outcome"`
}

// Metadata counts what a run did.
type Metadata struct {
	// Rounds counts the model calls that returned an assistant message.
	Rounds int `json:"rounds"`
	// ToolCallsMade counts the calls within the cap that were attempted:
	// unknown, invalid, denied, failed and timed-out calls included.
	ToolCallsMade int `json:"tool_calls_made"`
	// RejectedToolCalls counts calls answered "rejected": over the cap, or
	// repeating an earlier call id of the same message. ToolCallsMade +
	// RejectedToolCalls is the number of tool calls the model made.
	RejectedToolCalls int `json:"rejected_tool_calls"`
	// DroppedToolCalls counts calls past MaxToolCallsKept, dropped from the
	// transcript unanswered (their ids are not in it).
	DroppedToolCalls int `json:"dropped_tool_calls,omitempty"`
	// TruncatedObservations counts tool messages cut to
	// MaxObservationChars, by the worker or by the loop.
	TruncatedObservations int `json:"truncated_observations"`
	// Outcomes counts every answered call id by outcome.
	Outcomes map[protocol.Outcome]int `json:"outcomes"`
	// PromptTokens and CompletionTokens are the model's tokens as counted:
	// as reported, or estimated where the model reported none or nonsense
	// (see Usage), saturating instead of overflowing.
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	// ModelCalls counts calls of Model.Complete, failed ones included.
	ModelCalls int `json:"model_calls"`
	// TruncatedResponses counts model answers cut at their output limit
	// (finish_reason "length").
	TruncatedResponses int `json:"truncated_responses"`
	// MessagesTrimmed counts the messages model requests left out of their
	// window (Config.MaxHistoryMessages), summed over the requests.
	MessagesTrimmed int `json:"messages_trimmed,omitempty"`
	// Summarized counts the summaries Config.Summarizer wrote, and
	// SummarizerTokens the tokens they cost.
	Summarized       int `json:"summarized,omitempty"`
	SummarizerTokens int `json:"summarizer_tokens,omitempty"`
}

// CallRecord is what happened to one tool call id.
type CallRecord struct {
	Round int `json:"round"`
	// CallID is the id in the transcript, which the loop may have replaced
	// (see the package documentation).
	CallID string `json:"call_id"`
	// CallKey is the coordinator's key for the call; empty for rejected
	// calls.
	CallKey protocol.CallKey `json:"call_key,omitempty"`
	// Tool is the name the model wrote, clipped and escaped when it is not
	// a valid tool name.
	Tool    string           `json:"tool"`
	Outcome protocol.Outcome `json:"outcome"`
	// DurationMS is the coordinator's wall time from the start of the
	// call's handling (validation, approval, dispatch) to its answer.
	DurationMS int64 `json:"duration_ms"`
	// Worker and Attempt come from the worker's result or progress notice.
	Worker  string `json:"worker,omitempty"`
	Attempt int    `json:"attempt,omitempty"`
	// ErrorType is set for failed calls: the worker's error type (a type or
	// exit status, never a message), or "dispatch" when the call could not
	// be published.
	ErrorType string `json:"error_type,omitempty"`
}

func newResult(run protocol.RunID) *Result {
	return &Result{
		RunID:    run,
		Metadata: Metadata{Outcomes: map[protocol.Outcome]int{}},
		Calls:    []CallRecord{},
	}
}
