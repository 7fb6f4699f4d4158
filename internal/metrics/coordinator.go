package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolfleet/toolfleet/internal/discovery"
	"github.com/toolfleet/toolfleet/internal/natsbus/stores"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// Coordinator holds a coordinator's metrics. It implements loop.Observer
// (runs, calls, approvals, model calls) and discovery.SchemaObserver (schema
// conflicts); concurrent runs share it.
type Coordinator struct {
	loop.NopObserver

	tools         toolLabels
	conflictTools toolLabels
	runs          *prometheus.CounterVec
	runsInFlight  prometheus.Gauge
	calls         *prometheus.CounterVec
	duration      *prometheus.HistogramVec
	rejected      prometheus.Counter
	approvals     *prometheus.CounterVec
	modelLatency  *prometheus.HistogramVec
	tokens        *prometheus.CounterVec
	conflicts     *prometheus.CounterVec
	conflicted    prometheus.Gauge
	anomalies     *prometheus.CounterVec
}

var (
	_ loop.Observer            = (*Coordinator)(nil)
	_ discovery.SchemaObserver = (*Coordinator)(nil)
	_ stores.CatalogObserver   = (*Coordinator)(nil)
)

// catalogAnomalies is the closed vocabulary of the catalog anomaly label.
var catalogAnomalies = []string{stores.AnomalyApprovalConflict, stores.AnomalyOversized, stores.AnomalyFull}

// Closed vocabularies of the coordinator's labels.
var (
	terminationReasons = func() []string {
		out := make([]string, len(loop.TerminationReasons))
		for i, r := range loop.TerminationReasons {
			out[i] = string(r)
		}
		return out
	}()
	approvalResults = []string{
		string(loop.ApprovalApproved), string(loop.ApprovalDenied), string(loop.ApprovalExpired),
		string(loop.ApprovalUnavailable), string(loop.ApprovalCancelled),
	}
)

// NewCoordinator registers the coordinator metrics with reg.
func NewCoordinator(reg prometheus.Registerer) *Coordinator {
	c := &Coordinator{
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Subsystem: "coordinator", Name: "runs_total",
			Help: "Finished runs, by termination reason.",
		}, []string{"reason"}),
		runsInFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: Namespace, Subsystem: "coordinator", Name: "runs_in_flight",
			Help: "Runs going on now.",
		}),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Subsystem: "coordinator", Name: "calls_total",
			Help: "Answered tool call ids, by tool and outcome (\"_unknown\": a tool the catalog does not list).",
		}, []string{"tool", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Subsystem: "coordinator", Name: "call_duration_seconds",
			Help:    "Time from the start of a call's handling (validation, approval, dispatch) to its answer, by tool.",
			Buckets: CallBuckets,
		}, []string{"tool"}),
		rejected: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: Namespace, Subsystem: "coordinator", Name: "rejected_calls_total",
			Help: "Tool calls answered \"rejected\": over the per-round cap, or repeating an id.",
		}),
		approvals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Subsystem: "coordinator", Name: "approvals_total",
			Help: "Calls that needed approval, by how the gate settled them.",
		}, []string{"result"}),
		modelLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Subsystem: "model", Name: "call_duration_seconds",
			Help:    "Model call latency, by result (ok, error).",
			Buckets: ModelBuckets,
		}, []string{"result"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Subsystem: "model", Name: "tokens_total",
			Help: "Tokens the model reported, by kind (prompt, completion).",
		}, []string{"kind"}),
		conflicts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Subsystem: "schema", Name: "conflicts_total",
			Help: "Tool schema conflicts found between live workers or with the catalog, counted when new or changed.",
		}, []string{"tool"}),
		conflicted: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: Namespace, Subsystem: "schema", Name: "conflicted_tools",
			Help: "Tools whose schema live workers disagree on, at the last check.",
		}),
		anomalies: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Subsystem: "catalog", Name: "anomalies_total",
			Help: "Catalog entries that disagree on requires_approval (approval_conflict; the tool keeps requiring it) or were skipped (oversized, full).",
		}, []string{"kind"}),
	}
	c.runs = register(reg, c.runs)
	c.runsInFlight = register(reg, c.runsInFlight)
	c.calls = register(reg, c.calls)
	c.duration = register(reg, c.duration)
	c.rejected = register(reg, c.rejected)
	c.approvals = register(reg, c.approvals)
	c.modelLatency = register(reg, c.modelLatency)
	c.tokens = register(reg, c.tokens)
	c.conflicts = register(reg, c.conflicts)
	c.conflicted = register(reg, c.conflicted)
	c.anomalies = register(reg, c.anomalies)
	for _, k := range catalogAnomalies {
		c.anomalies.WithLabelValues(k)
	}
	// Series that alerts compare against exist from the start, at zero.
	for _, r := range terminationReasons {
		c.runs.WithLabelValues(r)
	}
	for _, k := range []string{"prompt", "completion"} {
		c.tokens.WithLabelValues(k)
	}
	return c
}

// RunStarted counts a run in flight.
func (c *Coordinator) RunStarted() { c.runsInFlight.Inc() }

// RunEnded counts a finished run.
func (c *Coordinator) RunEnded(reason loop.TerminationReason) {
	c.runsInFlight.Dec()
	c.runs.WithLabelValues(oneOf(string(reason), terminationReasons...)).Inc()
}

// ModelCall observes a model call's latency and tokens.
func (c *Coordinator) ModelCall(d time.Duration, u loop.Usage, err error) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	c.modelLatency.WithLabelValues(result).Observe(d.Seconds())
	if u.PromptTokens > 0 {
		c.tokens.WithLabelValues("prompt").Add(float64(u.PromptTokens))
	}
	if u.CompletionTokens > 0 {
		c.tokens.WithLabelValues("completion").Add(float64(u.CompletionTokens))
	}
}

// CallEnded counts an answered call and its duration.
func (c *Coordinator) CallEnded(tool string, outcome protocol.Outcome, d time.Duration) {
	t := c.tools.label(tool)
	c.calls.WithLabelValues(t, outcomeLabel(outcome)).Inc()
	c.duration.WithLabelValues(t).Observe(d.Seconds())
	if outcome == protocol.OutcomeRejected {
		c.rejected.Inc()
	}
}

// Approval counts how the gate settled a call.
func (c *Coordinator) Approval(r loop.ApprovalResult) {
	c.approvals.WithLabelValues(oneOf(string(r), approvalResults...)).Inc()
}

// CatalogAnomaly counts a catalog entry that disagrees or was skipped.
func (c *Coordinator) CatalogAnomaly(kind string) {
	c.anomalies.WithLabelValues(oneOf(kind, catalogAnomalies...)).Inc()
}

// SchemaConflict counts a new or changed schema conflict.
func (c *Coordinator) SchemaConflict(tool string) {
	c.conflicts.WithLabelValues(c.conflictTools.label(tool)).Inc()
}

// ConflictedTools sets the number of tools in conflict.
func (c *Coordinator) ConflictedTools(n int) { c.conflicted.Set(float64(n)) }
