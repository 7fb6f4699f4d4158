package openai

import "github.com/toolfleet/toolfleet/pkg/logkey"

// Log keys. Values are ids, counts, durations and statuses — never prompts,
// content, arguments or the key.
const (
	logModel            = "model"
	logAttempt          = logkey.Attempt
	logStatus           = "status"
	logDuration         = logkey.DurationMS
	logMessages         = "messages"
	logTools            = "tools"
	logToolCalls        = "tool_calls"
	logFinishReason     = "finish_reason"
	logPromptTokens     = "prompt_tokens"
	logCompletionTokens = "completion_tokens"
	logErrorKind        = "error_kind"
)
