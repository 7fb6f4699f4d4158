package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolfleet/toolfleet/internal/natsbus/admission"
	"github.com/toolfleet/toolfleet/internal/natsbus/workerbus"
)

// Worker holds a toolworker's metrics: a sink of workerbus.CallEvent, each
// event counted once. Several workers of one process may share it.
type Worker struct {
	tools          toolLabels
	calls          *prometheus.CounterVec
	duration       *prometheus.HistogramVec
	inFlight       *prometheus.GaugeVec
	redeliveries   *prometheus.CounterVec
	terminated     *prometheus.CounterVec
	resultFailures *prometheus.CounterVec
}

var _ workerbus.WorkerObserver = (*Worker)(nil)

// NewWorker registers the worker metrics with reg, or shares those
// already registered there.
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
	// Collectors already registered (another worker's of the process)
	// are shared: the workers' calls are counted together.
	w.calls = register(reg, w.calls)
	w.duration = register(reg, w.duration)
	w.inFlight = register(reg, w.inFlight)
	w.redeliveries = register(reg, w.redeliveries)
	w.terminated = register(reg, w.terminated)
	w.resultFailures = register(reg, w.resultFailures)
	return w
}

// Observe counts ev: a redelivery, a termination by reason, a call in
// flight from its start to its finish, a finished call by outcome with its
// duration, a result that could not be published. A skipped delivery has
// no metric of its own (the delivery that runs the call counts it).
func (w *Worker) Observe(ev workerbus.CallEvent) {
	switch ev.Kind {
	case workerbus.CallDelivered:
		if ev.Attempt > 1 {
			w.redeliveries.WithLabelValues(w.tools.label(string(ev.Tool))).Inc()
		}
	case workerbus.CallTerminated:
		w.terminated.WithLabelValues(w.tools.label(string(ev.Tool)),
			oneOf(ev.Reason, workerbus.TerminatedMalformed, workerbus.TerminatedExpired, workerbus.TerminatedUnapproved,
				admission.TerminatedRateLimited)).Inc()
	case workerbus.CallStarted:
		w.inFlight.WithLabelValues(w.tools.label(string(ev.Tool))).Inc()
	case workerbus.CallFinished:
		t := w.tools.label(string(ev.Tool))
		w.inFlight.WithLabelValues(t).Dec()
		w.calls.WithLabelValues(t, outcomeLabel(ev.Outcome)).Inc()
		w.duration.WithLabelValues(t).Observe(ev.Duration.Seconds())
	case workerbus.ResultFailed:
		w.resultFailures.WithLabelValues(w.tools.label(string(ev.Tool))).Inc()
	}
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
