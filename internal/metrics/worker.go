package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// Worker holds a toolworker's metrics. It implements natsbus.WorkerObserver;
// several workers of one process may share it.
type Worker struct {
	natsbus.NopWorkerObserver

	tools          toolLabels
	calls          *prometheus.CounterVec
	duration       *prometheus.HistogramVec
	inFlight       *prometheus.GaugeVec
	redeliveries   *prometheus.CounterVec
	terminated     *prometheus.CounterVec
	resultFailures *prometheus.CounterVec
}

var _ natsbus.WorkerObserver = (*Worker)(nil)

// NewWorker registers the worker metrics with reg.
func NewWorker(reg prometheus.Registerer) *Worker {
	w := &Worker{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Subsystem: "worker", Name: "calls_total",
			Help: "Tool calls this worker ran to an answer, by tool and outcome.",
		}, []string{"tool", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Subsystem: "worker", Name: "call_duration_seconds",
			Help:    "How long tools ran on this worker, by tool.",
			Buckets: CallBuckets,
		}, []string{"tool"}),
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace, Subsystem: "worker", Name: "calls_in_flight",
			Help: "Tool calls running on this worker now, by tool.",
		}, []string{"tool"}),
		redeliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Subsystem: "worker", Name: "redeliveries_total",
			Help: "Call messages this worker took that had been delivered before, by tool.",
		}, []string{"tool"}),
		terminated: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Subsystem: "worker", Name: "calls_terminated_total",
			Help: "Call messages terminated without running, by tool and reason (malformed, expired, unapproved, rate_limited).",
		}, []string{"tool", "reason"}),
		resultFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Subsystem: "worker", Name: "result_failures_total",
			Help: "Finished calls whose result could not be published, by tool.",
		}, []string{"tool"}),
	}
	reg.MustRegister(w.calls, w.duration, w.inFlight, w.redeliveries, w.terminated, w.resultFailures)
	return w
}

// Delivered counts redeliveries.
func (w *Worker) Delivered(tool string, attempt int) {
	if attempt > 1 {
		w.redeliveries.WithLabelValues(w.tools.label(tool)).Inc()
	}
}

// CallTerminated counts a message terminated without running.
func (w *Worker) CallTerminated(tool, reason string) {
	w.terminated.WithLabelValues(w.tools.label(tool),
		oneOf(reason, natsbus.TerminatedMalformed, natsbus.TerminatedExpired, natsbus.TerminatedUnapproved,
			natsbus.TerminatedRateLimited)).Inc()
}

// CallStarted counts a call in flight.
func (w *Worker) CallStarted(tool string) {
	w.inFlight.WithLabelValues(w.tools.label(tool)).Inc()
}

// CallFinished counts a finished call and its duration.
func (w *Worker) CallFinished(tool string, outcome protocol.Outcome, d time.Duration) {
	t := w.tools.label(tool)
	w.inFlight.WithLabelValues(t).Dec()
	w.calls.WithLabelValues(t, outcomeLabel(outcome)).Inc()
	w.duration.WithLabelValues(t).Observe(d.Seconds())
}

// ResultFailed counts a result that could not be published.
func (w *Worker) ResultFailed(tool string) {
	w.resultFailures.WithLabelValues(w.tools.label(tool)).Inc()
}

// RegisterExecEscapes registers toolfleet_worker_exec_escapes_total, read
// at each scrape from escaped: processes exec tools started outside their
// process group (setsid, a double fork) that were found and killed.
func RegisterExecEscapes(reg prometheus.Registerer, escaped func() int64) {
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Namespace: Namespace, Subsystem: "worker", Name: "exec_escapes_total",
		Help: "Processes exec tools started outside their process group (setsid, a double fork), found and killed.",
	}, func() float64 { return float64(escaped()) }))
}
