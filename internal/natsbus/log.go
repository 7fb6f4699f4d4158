package natsbus

import (
	"time"

	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/pkg/logkey"
)

// Log keys. Values logged under them are ids, names, codes and numbers,
// never arguments, outputs or payloads.
const (
	logTool      = logkey.Tool
	logRun       = logkey.RunID
	logCallKey   = logkey.CallKey
	logOutcome   = logkey.Outcome
	logAttempt   = logkey.Attempt
	logWorker    = logkey.Worker
	logSubject   = "subject"
	logCode      = "code"
	logStream    = "stream"
	logConsumer  = "consumer"
	logBucket    = "bucket"
	logKey       = "key"
	logURL       = "url"
	logOld       = "old_digest"
	logNew       = "new_digest"
	logInFlight  = "in_flight"
	logDropped   = "dropped"
	logErrorType = logkey.ErrorType
)

// logRetryAfterMS is a rate-limited call's wait, in whole milliseconds.
const logRetryAfterMS = "retry_after_ms"

// sampled returns l limited to a burst of lines per second, for lines that a
// hostile or broken peer can trigger at will.
func sampled(l zerolog.Logger) zerolog.Logger {
	return l.Sample(&zerolog.BurstSampler{Burst: 10, Period: time.Second})
}
