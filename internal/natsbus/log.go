package natsbus

import (
	"time"

	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/pkg/logkey"
)

// Log keys. Values logged under them are ids, names, codes and numbers,
// never arguments, outputs or payloads.
const (
	LogTool      = logkey.Tool
	LogRun       = logkey.RunID
	LogCallKey   = logkey.CallKey
	LogOutcome   = logkey.Outcome
	LogAttempt   = logkey.Attempt
	LogWorker    = logkey.Worker
	LogSubject   = "subject"
	LogCode      = "code"
	LogStream    = "stream"
	LogConsumer  = "consumer"
	LogBucket    = "bucket"
	LogKey       = "key"
	logURL       = "url"
	LogOld       = "old_digest"
	LogNew       = "new_digest"
	logInFlight  = "in_flight"
	LogDropped   = "dropped"
	logErrorType = logkey.ErrorType
)

// LogRetryAfterMS is a rate-limited call's wait, in whole milliseconds.
const LogRetryAfterMS = "retry_after_ms"

// Sampled returns l limited to a burst of lines per second, for lines that a
// hostile or broken peer can trigger at will.
func Sampled(l zerolog.Logger) zerolog.Logger {
	return l.Sample(&zerolog.BurstSampler{Burst: 10, Period: time.Second})
}
