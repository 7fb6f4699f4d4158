// Package logkey is the log vocabulary every toolfleet package shares: the
// keys of what more than one package logs, so that a query for one run, one
// call or one tool finds the lines of the loop, the transport, the worker,
// the harness and the model providers alike. Each package keeps its own
// log.go naming the keys it uses; those named here are spelled only here.
//
// Durations are logged in whole milliseconds, as integers, under [DurationMS]:
// Int64(DurationMS, d.Milliseconds()), never zerolog's Dur (a float).
package logkey

// Keys shared across packages.
const (
	// RunID is a run's id.
	RunID = "run_id"
	// CallKey is a call's key (run, round, index), the subject-safe id.
	CallKey = "call_key"
	// CallID is the model's id of a tool call.
	CallID = "call_id"
	// Tool is a tool's name.
	Tool = "tool"
	// Outcome is a call's outcome.
	Outcome = "outcome"
	// DurationMS is how long something took, in whole milliseconds: an
	// integer in every package.
	DurationMS = "duration_ms"
	// Attempt counts the deliveries or tries of one thing, from 1.
	Attempt = "attempt"
	// Worker is a worker's name.
	Worker = "worker"
	// ErrorType is the stable type of an error, never its message.
	ErrorType = "error_type"
	// Round is a loop round, from 1.
	Round = "round"
)
