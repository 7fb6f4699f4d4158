package workerbus

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natsbus/admission"
	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// Reasons a worker terminates a delivered call without running it, as a
// [CallTerminated] event's Reason says.
const (
	TerminatedMalformed = termMalformed
	TerminatedExpired   = termExpired
	// TerminatedUnapproved is a call that needs approval and carries no
	// proof the worker could verify: answered denied, never run.
	TerminatedUnapproved = termUnapproved
)

// Reasons a worker leaves a delivered call to another delivery without
// running it, as a [CallSkipped] event's Reason says.
const (
	// SkippedRunningHere is an idempotent call redelivered while this
	// worker runs it from the same stream message.
	SkippedRunningHere = "running_here"
	// SkippedClaimed is a non-idempotent call another delivery claimed,
	// or its coordinator withdrew.
	SkippedClaimed = "claimed"
	// SkippedClaimFailed is a non-idempotent call whose claim the server
	// did not answer: left to be redelivered and claimed again.
	SkippedClaimFailed = "claim_failed"
)

// CallEventKind names a fact about one call message a [Worker] took.
type CallEventKind uint8

// The facts a worker observes, each once per delivered message.
const (
	// CallDelivered: a call message was taken, before any check.
	CallDelivered CallEventKind = iota + 1
	// CallTerminated: the message was settled without running the call,
	// for Reason (a Terminated* constant); the call was answered Outcome
	// unless it was malformed.
	CallTerminated
	// CallSkipped: the call was not run by this delivery, for Reason (a
	// Skipped* constant); another delivery runs or ran it.
	CallSkipped
	// CallStarted: the call was handed to the harness.
	CallStarted
	// CallFinished: the harness answered, with Outcome, Duration and
	// ErrorType. Exactly one follows every CallStarted.
	CallFinished
	// ResultFailed: the call's answer (Outcome) could not be published.
	ResultFailed
)

var callEventNames = [...]string{
	CallDelivered:  "call_delivered",
	CallTerminated: "call_terminated",
	CallSkipped:    "call_skipped",
	CallStarted:    "call_started",
	CallFinished:   "call_finished",
	ResultFailed:   "result_failed",
}

// String is the event's name, as spans and tests show it.
func (k CallEventKind) String() string {
	if int(k) < len(callEventNames) && callEventNames[k] != "" {
		return callEventNames[k]
	}
	return "unknown"
}

// CallEvent is one fact about one delivered call: the worker makes one
// value per fact and hands it to every sink — the tool's counters (its
// micro STATS), the [WorkerObserver] (metrics), the delivery's span and
// the log — so that no sink counts it apart from the others.
type CallEvent struct {
	Kind CallEventKind
	// Tool is one of the worker's own tools: safe as a metric label.
	Tool protocol.ToolName
	// RunID and CallKey identify the call; empty for a malformed message.
	RunID   protocol.RunID
	CallKey protocol.CallKey
	// Attempt is the server's delivery count, from 1 (> 1: a redelivery).
	Attempt int
	// Reason says why a call was terminated or skipped.
	Reason string
	// Code is a stable code of what was wrong: a malformed message's, a
	// refused approval's; "expired" for a skipped call past its deadline.
	Code string
	// Outcome is a finished call's, or the answer of a terminated call or
	// of a result that could not be published.
	Outcome protocol.Outcome
	// Duration is how long a finished call's tool ran.
	Duration time.Duration
	// ErrorType is a finished call's (harness.Result.ErrorType).
	ErrorType string
	// RetryAfter is when a rate-limited call may be tried again.
	RetryAfter time.Duration
	// Err is the worker's own failure behind the event (a claim, a
	// publish, a rate-limit reservation, reading the approvals), for the
	// log: it names an operation, never a payload.
	Err error

	// subject is where a malformed message came.
	subject string
}

// WorkerObserver receives a [Worker]'s events, for metrics. Observe is
// called from the worker's goroutines, concurrently, and must be quick
// and never block.
type WorkerObserver interface {
	Observe(CallEvent)
}

// NopWorkerObserver is a [WorkerObserver] that observes nothing.
type NopWorkerObserver struct{}

var _ WorkerObserver = NopWorkerObserver{}

// Observe does nothing.
func (NopWorkerObserver) Observe(CallEvent) {}

// callRecord emits the events of one delivery, each filled with the
// delivery's ids and handed to every sink once.
type callRecord struct {
	w       *Worker
	tc      *toolConsumer
	ct      callTrace // the delivery's spans
	subject string
	run     protocol.RunID
	key     protocol.CallKey
	attempt int
}

// accepted sets the ids of the delivery's call, once it is decoded.
func (r *callRecord) accepted(c protocol.Call) { r.run, r.key = c.RunID, c.CallKey }

// emit completes ev with the delivery's ids and hands it to every sink.
func (r *callRecord) emit(ev CallEvent) { r.handOut(ev, nil, nil) }

// finished emits ev, a CallFinished, whose log line also carries the
// fields of call and of res, the harness's answer (harness.CallFields).
// They are handed to the log apart from ev, which the other sinks keep
// or pass on, so that they need not leave the caller's stack.
func (r *callRecord) finished(ev CallEvent, call *harness.Call, res *harness.Result) {
	r.handOut(ev, call, res)
}

// handOut completes ev with the delivery's ids and hands it to every
// sink, and call and res (nil but for a finished call) to the log.
func (r *callRecord) handOut(ev CallEvent, call *harness.Call, res *harness.Result) {
	ev.Tool, ev.RunID, ev.CallKey, ev.Attempt, ev.subject = r.tc.name, r.run, r.key, r.attempt, r.subject
	r.tc.meter.record(ev)
	r.w.cfg.Observer.Observe(ev)
	r.ct.record(ev)
	r.w.logEvent(ev, call, res)
}

// logEvent writes ev's line: one per event, none for a delivery or a
// start (the finish says both), the ids under the shared log keys; a
// finished call's line carries call's and res's fields.
func (w *Worker) logEvent(ev CallEvent, call *harness.Call, res *harness.Result) {
	var line *zerolog.Event
	var msg string
	switch ev.Kind {
	case CallTerminated:
		switch ev.Reason {
		case TerminatedMalformed:
			// A hostile or broken peer can send these at will: sampled,
			// and nothing of the message but its subject.
			w.limited.Warn().Str(natsbus.LogTool, string(ev.Tool)).Str(natsbus.LogSubject, ev.subject).Str(natsbus.LogCode, ev.Code).
				Int(natsbus.LogAttempt, ev.Attempt).Msg("terminated a malformed call")
			return
		case TerminatedExpired:
			line, msg = w.log.Info(), "call expired before it started: not run"
		case TerminatedUnapproved:
			line, msg = w.log.Warn(), "refused a call that needs approval: no valid approval in the approvals stream; not run"
			if ev.Code == codeRecordUnwritten {
				line, msg = w.log.Warn(), "refused an approved call: its execution record could not be written; not run"
			}
		case admission.TerminatedRateLimited:
			line, msg = w.log.Info(), "call rate limited: not run"
			if ev.Err != nil {
				line, msg = w.log.Warn(), "could not reserve the tool's rate limit: answered rate_limited"
			}
		default:
			line, msg = w.log.Warn(), "terminated a call: not run"
		}
	case CallSkipped:
		switch ev.Reason {
		case SkippedRunningHere:
			line, msg = w.log.Info(), "call redelivered while it runs here: not run again"
		case SkippedClaimed:
			line, msg = w.log.Info(), "call already claimed by another delivery, or withdrawn: not run"
		default:
			line, msg = w.log.Warn(), "could not claim a non-idempotent call before running it: not run"
		}
	case CallFinished:
		line = w.log.Info()
		if line == nil {
			return
		}
		line = harness.CallFields(line.Str(natsbus.LogTool, string(ev.Tool)).Str(natsbus.LogRun, string(ev.RunID)).
			Str(natsbus.LogCallKey, string(ev.CallKey)).Int(natsbus.LogAttempt, ev.Attempt), *call, *res)
		line.Msg("call finished")
		return
	case ResultFailed:
		line, msg = w.log.Error(), "could not publish a call's result"
	default:
		return // delivered, started: the finish or the termination says it
	}
	if line == nil {
		return
	}
	line = line.Str(natsbus.LogTool, string(ev.Tool)).Str(natsbus.LogRun, string(ev.RunID)).Str(natsbus.LogCallKey, string(ev.CallKey)).
		Int(natsbus.LogAttempt, ev.Attempt)
	if ev.Code != "" {
		line = line.Str(natsbus.LogCode, ev.Code)
	}
	if ev.Outcome != "" {
		line = line.Str(natsbus.LogOutcome, string(ev.Outcome))
	}
	if ev.RetryAfter > 0 {
		line = line.Int64(natsbus.LogRetryAfterMS, ev.RetryAfter.Milliseconds())
	}
	if ev.Err != nil {
		line = line.Err(ev.Err)
	}
	line.Msg(msg)
}

// ToolStats counts what a worker did with one tool's calls. It is the
// "data" of the tool's endpoint in the worker's micro STATS answer (the
// endpoint's own request counts are tool-info requests, not calls).
type ToolStats struct {
	// CallSubject is where the tool's calls travel (JetStream).
	CallSubject string `json:"call_subject"`
	// Delivered counts call messages taken, redeliveries included.
	Delivered int64 `json:"delivered"`
	// Redelivered counts deliveries after the first.
	Redelivered int64 `json:"redelivered"`
	// Calls counts calls that ran to an answer.
	Calls int64 `json:"calls"`
	// InFlight is the number of calls running now.
	InFlight int64 `json:"in_flight"`
	// Outcomes counts finished calls by outcome.
	Outcomes map[protocol.Outcome]int64 `json:"outcomes"`
	// Expired, Malformed, Unapproved and RateLimited count messages
	// terminated without running, by reason.
	Expired     int64 `json:"expired"`
	Malformed   int64 `json:"malformed"`
	Unapproved  int64 `json:"unapproved"`
	RateLimited int64 `json:"rate_limited"`
	// Skipped counts deliveries left to another delivery of the same call.
	Skipped int64 `json:"skipped"`
	// ResultErrors counts results that could not be published.
	ResultErrors int64 `json:"result_errors"`
	// TotalTimeNS is the tools' total run time, in nanoseconds.
	TotalTimeNS int64 `json:"total_time_ns"`
}

// toolMeter keeps one tool's ToolStats: the events' sink for the micro
// STATS answer.
type toolMeter struct {
	subject string

	delivered, redelivered, calls, inFlight     atomic.Int64
	expired, malformed, unapproved, rateLimited atomic.Int64
	skipped, resultErrors, nanos                atomic.Int64

	mu       sync.Mutex
	outcomes map[protocol.Outcome]int64
}

func newToolMeter(subject string) *toolMeter {
	return &toolMeter{subject: subject, outcomes: map[protocol.Outcome]int64{}}
}

// record counts ev.
func (m *toolMeter) record(ev CallEvent) {
	switch ev.Kind {
	case CallDelivered:
		m.delivered.Add(1)
		if ev.Attempt > 1 {
			m.redelivered.Add(1)
		}
	case CallTerminated:
		switch ev.Reason {
		case TerminatedExpired:
			m.expired.Add(1)
		case TerminatedUnapproved:
			m.unapproved.Add(1)
		case admission.TerminatedRateLimited:
			m.rateLimited.Add(1)
		default:
			m.malformed.Add(1)
		}
	case CallSkipped:
		m.skipped.Add(1)
	case CallStarted:
		m.inFlight.Add(1)
	case CallFinished:
		m.mu.Lock()
		m.outcomes[ev.Outcome]++
		m.mu.Unlock()
		m.calls.Add(1)
		m.nanos.Add(int64(ev.Duration))
		m.inFlight.Add(-1)
	case ResultFailed:
		m.resultErrors.Add(1)
	}
}

func (m *toolMeter) stats() ToolStats {
	m.mu.Lock()
	outcomes := make(map[protocol.Outcome]int64, len(m.outcomes))
	for k, v := range m.outcomes {
		outcomes[k] = v
	}
	m.mu.Unlock()
	return ToolStats{
		CallSubject:  m.subject,
		Delivered:    m.delivered.Load(),
		Redelivered:  m.redelivered.Load(),
		Calls:        m.calls.Load(),
		InFlight:     m.inFlight.Load(),
		Outcomes:     outcomes,
		Expired:      m.expired.Load(),
		Malformed:    m.malformed.Load(),
		Unapproved:   m.unapproved.Load(),
		RateLimited:  m.rateLimited.Load(),
		Skipped:      m.skipped.Load(),
		ResultErrors: m.resultErrors.Load(),
		TotalTimeNS:  m.nanos.Load(),
	}
}
