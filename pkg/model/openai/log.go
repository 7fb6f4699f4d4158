package openai

// Log keys. Values are ids, counts, durations and statuses — never prompts,
// content, arguments or the key.
const (
	logModel            = "model"
	logAttempt          = "attempt"
	logStatus           = "status"
	logDuration         = "duration"
	logMessages         = "messages"
	logTools            = "tools"
	logToolCalls        = "tool_calls"
	logFinishReason     = "finish_reason"
	logPromptTokens     = "prompt_tokens"
	logCompletionTokens = "completion_tokens"
	logErrorKind        = "error_kind"
)
