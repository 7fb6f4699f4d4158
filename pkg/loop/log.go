package loop

import (
	"fmt"
	"sort"

	"github.com/toolfleet/toolfleet/pkg/logkey"
)

// Log keys and event names of the loop's trace lines. Lines carry ids, tool
// names, argument keys, digests, outcomes, durations, counts and sizes;
// never argument values (unless Config.TraceArgs), tool output, validation
// messages, operator reasons or error messages.
const (
	logKeyEvent            = "event"
	logKeyRun              = logkey.RunID
	logKeyRound            = logkey.Round
	logKeyCallKey          = logkey.CallKey
	logKeyCallID           = logkey.CallID
	logKeyTool             = logkey.Tool
	logKeyArgKeys          = "arg_keys"
	logKeyArgs             = "args"
	logKeyArgsDigest       = "args_digest"
	logKeyArgsBytes        = "args_bytes"
	logKeyOutcome          = logkey.Outcome
	logKeyDurationMS       = logkey.DurationMS
	logKeyWorker           = logkey.Worker
	logKeyAttempt          = logkey.Attempt
	logKeyMessages         = "messages"
	logKeyTools            = "tools"
	logKeyToolCalls        = "tool_calls"
	logKeyPromptTokens     = "prompt_tokens"
	logKeyCompletionTokens = "completion_tokens"
	logKeyFinishReason     = "finish_reason"
	logKeyErrorType        = logkey.ErrorType
	logKeyDropReason       = "drop_reason"
	logKeyRequested        = "requested"
	logKeyLimit            = "limit"
	logKeyCount            = "count"
	logKeyDropped          = "dropped"
	logKeyTermination      = "termination_reason"
	logKeyApproval         = "approval"
	logKeyIDProblem        = "id_problem"

	evModelCallStart     = "model_call_start"
	evModelCallEnd       = "model_call_end"
	evToolCallStart      = "tool_call_start"
	evToolCallEnd        = "tool_call_end"
	evCallsRejected      = "tool_calls_rejected"
	evTranscriptTooLarge = "transcript_too_large"
	// evApprovalToolMissing: a RequireApproval name the catalog does not
	// list (a typo, or no worker serves it yet), warned once.
	evApprovalToolMissing = "require_approval_tool_missing"
	evCallIDReplaced      = "call_id_replaced"
	evEventDropped        = "event_dropped"
	evDropsSuppress       = "events_dropped_unlogged"
	evToolSkipped         = "tool_skipped"
	evInputUnanswered     = "input_calls_unanswered"
	evCancelFailed        = "cancel_failed"
	evDispatchFailed      = "dispatch_failed"
	evInboxClose          = "inbox_close_failed"
	evProgress            = "call_started"
	evWithdrawn           = "call_withdrawn"
	evClaimed             = "call_claimed"
	evRunEnd              = "run_end"
	evJournalFailed       = "journal_append_failed"
	evJournalLost         = "journal_lost"
	evRunParked           = "run_parked"
	evRunInput            = "run_input"
	// evPolicyMissing: a resumed run's start entry holds no policy (an
	// older coordinator started it): every call of it needs approval.
	evPolicyMissing = "run_policy_missing"
	evCatchUpSlow   = "resume_catch_up_slow"
)

// Reasons for dropping an inbox event (logKeyDropReason).
const (
	dropMalformed      = "malformed_event"
	dropInvalid        = "invalid_message"
	dropOtherRun       = "other_run"
	dropInvalidOutcome = "invalid_outcome"
	dropUnknownKey     = "unknown_call_key"
	dropToolMismatch   = "tool_mismatch"
	dropDuplicate      = "duplicate"
	dropLate           = "late"
)

// maxLoggedDropsPerRound rate-limits event_dropped lines: a flood of forged
// results costs one summary line, not one line each.
const maxLoggedDropsPerRound = 16

// maxLoggedArgKeys bounds the argument keys of one trace line.
const maxLoggedArgKeys = 32

// maxLoggedArgBytes bounds argument values logged under Config.TraceArgs.
const maxLoggedArgBytes = 4096

// argKeys returns the sorted, clipped keys of a parsed argument object,
// at most maxLoggedArgKeys of them (a last "…" says there were more).
func argKeys(obj map[string]any) []string {
	keys := make([]string, 0, min(len(obj), maxLoggedArgKeys+1))
	for k := range obj {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if len(keys) > maxLoggedArgKeys {
		keys = append(keys[:maxLoggedArgKeys], "…")
	}
	for i, k := range keys {
		keys[i] = clipName(k)
	}
	return keys
}

// errType names an error's Go type, which is all a trace line says of it.
func errType(err error) string {
	if err == nil {
		return ""
	}
	return fmt.Sprintf("%T", err)
}
