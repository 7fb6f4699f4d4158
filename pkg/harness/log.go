package harness

import "github.com/toolfleet/toolfleet/pkg/logkey"

// Log keys. Logs carry tool names, outcomes, durations, sizes and argument
// keys; never argument values, outputs, error messages, panic values, stack
// traces or stderr (stderr only with [Config].LogStderr).
const (
	logKeyTool        = logkey.Tool
	logKeyToolNameLen = "tool_name_len" // for names that are not valid tokens
	logKeyOutcome     = logkey.Outcome
	logKeyDurationMS  = logkey.DurationMS
	logKeyOutputChars = "output_chars"
	logKeyTruncated   = "truncated"
	logKeyArgKeys     = "arg_keys"
	logKeyArgsDigest  = "args_digest"
	logKeyArgsBytes   = "args_bytes"
	logKeyErrorType   = logkey.ErrorType
	logKeyAbandoned   = "abandoned"
	logKeyPID         = "pid"
	logKeyStderr      = "stderr"
	logKeyStderrBytes = "stderr_bytes"
)

// Bounds on what one log line may carry about arguments.
const (
	maxLoggedKeys   = 32
	maxLoggedKeyLen = 64
	// maxLoggedStderr bounds the stderr logged with Config.LogStderr, in runes.
	maxLoggedStderr = 2000
)
