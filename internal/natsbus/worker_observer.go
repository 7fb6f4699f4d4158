package natsbus

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// Reasons a worker terminates a delivered call without running it, as
// [WorkerObserver.CallTerminated] reports them.
const (
	TerminatedMalformed = termMalformed
	TerminatedExpired   = termExpired
	// TerminatedUnapproved is a call that needs approval and carries no
	// proof the worker could verify: answered denied, never run.
	TerminatedUnapproved = termUnapproved
)

// WorkerObserver receives a [Worker]'s measurements, for metrics. Its
// methods are called from the worker's goroutines, concurrently, and must be
// quick and never block. tool is always one of the worker's own tools, so
// it is safe as a metric label.
//
// Implementations should embed [NopWorkerObserver], so that methods added
// later have a default.
type WorkerObserver interface {
	// Delivered is called for every call message the worker takes, before
	// it is checked; attempt is the server's delivery count (> 1 for a
	// redelivery).
	Delivered(tool string, attempt int)
	// CallTerminated is called when a delivered message is terminated
	// without running: reason is TerminatedMalformed or TerminatedExpired.
	CallTerminated(tool, reason string)
	// CallStarted is called when a call is handed to the harness.
	CallStarted(tool string)
	// CallFinished is called once per started call, when the harness
	// answers: the outcome and how long the tool ran.
	CallFinished(tool string, outcome protocol.Outcome, d time.Duration)
	// ResultFailed is called when a finished call's result could not be
	// published.
	ResultFailed(tool string)
}

// NopWorkerObserver is a [WorkerObserver] that observes nothing.
type NopWorkerObserver struct{}

var _ WorkerObserver = NopWorkerObserver{}

// Delivered does nothing.
func (NopWorkerObserver) Delivered(string, int) {}

// CallTerminated does nothing.
func (NopWorkerObserver) CallTerminated(string, string) {}

// CallStarted does nothing.
func (NopWorkerObserver) CallStarted(string) {}

// CallFinished does nothing.
func (NopWorkerObserver) CallFinished(string, protocol.Outcome, time.Duration) {}

// ResultFailed does nothing.
func (NopWorkerObserver) ResultFailed(string) {}

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
	// Expired and Malformed count messages terminated without running.
	Expired   int64 `json:"expired"`
	Malformed int64 `json:"malformed"`
	// ResultErrors counts results that could not be published.
	ResultErrors int64 `json:"result_errors"`
	// TotalTimeNS is the tools' total run time, in nanoseconds.
	TotalTimeNS int64 `json:"total_time_ns"`
}

// toolMeter keeps one tool's ToolStats and forwards every event to the
// configured observer.
type toolMeter struct {
	name    string
	subject string
	obs     WorkerObserver

	delivered, redelivered, calls, inFlight atomic.Int64
	expired, malformed, resultErrors, nanos atomic.Int64

	mu       sync.Mutex
	outcomes map[protocol.Outcome]int64
}

func newToolMeter(name protocol.ToolName, subject string, obs WorkerObserver) *toolMeter {
	if obs == nil {
		obs = NopWorkerObserver{}
	}
	return &toolMeter{name: string(name), subject: subject, obs: obs, outcomes: map[protocol.Outcome]int64{}}
}

func (m *toolMeter) onDelivered(attempt int) {
	m.delivered.Add(1)
	if attempt > 1 {
		m.redelivered.Add(1)
	}
	m.obs.Delivered(m.name, attempt)
}

func (m *toolMeter) onTerminated(reason string) {
	switch reason {
	case TerminatedExpired:
		m.expired.Add(1)
	case TerminatedUnapproved:
		// counted by WorkerStats.Unapproved and the observer
	default:
		m.malformed.Add(1)
	}
	m.obs.CallTerminated(m.name, reason)
}

func (m *toolMeter) onStarted() {
	m.inFlight.Add(1)
	m.obs.CallStarted(m.name)
}

func (m *toolMeter) onFinished(o protocol.Outcome, d time.Duration) {
	m.mu.Lock()
	m.outcomes[o]++
	m.mu.Unlock()
	m.calls.Add(1)
	m.nanos.Add(int64(d))
	m.inFlight.Add(-1)
	m.obs.CallFinished(m.name, o, d)
}

func (m *toolMeter) onResultFailed() {
	m.resultErrors.Add(1)
	m.obs.ResultFailed(m.name)
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
		ResultErrors: m.resultErrors.Load(),
		TotalTimeNS:  m.nanos.Load(),
	}
}
