package metrics

import "github.com/prometheus/client_golang/prometheus"

// Kinds of the messages a coordinator refuses to act on, the closed
// vocabulary of toolfleet_coordinator_refused_messages_total's kind label.
const (
	// RefusedCancelRequest: a message on a run's cancel subject that is
	// not a valid cancel request of that run; the run is not cancelled.
	RefusedCancelRequest = "cancel_request"
	// RefusedRunResult: a value under a run's key in the runs bucket that
	// is not a result of that run; the run runs and its result replaces it.
	RefusedRunResult = "run_result"
	// RefusedAgentRevision: a newer revision of an agent that does not
	// validate; the run runs on the newest one that does.
	RefusedAgentRevision = "agent_revision"
	// RefusedProgress: a progress report that claims a call of another
	// tool; it is not passed on.
	RefusedProgress = "progress"
	// RefusedRunInput: a message on a run input subject that is not a
	// valid input of that run from its own client; the run does not see
	// it.
	RefusedRunInput = "run_input"
)

var refusedKinds = []string{RefusedCancelRequest, RefusedRunResult, RefusedAgentRevision, RefusedProgress, RefusedRunInput}

// Refused counts the messages a coordinator found where the fleet keeps
// something it acts on, and refused because they are not what that place
// holds: toolfleet_coordinator_refused_messages_total, by kind.
type Refused struct {
	total *prometheus.CounterVec
}

// NewRefused registers toolfleet_coordinator_refused_messages_total with
// reg, every kind at 0.
func NewRefused(reg prometheus.Registerer) *Refused {
	r := &Refused{total: prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Subsystem: "coordinator", Name: "refused_messages_total",
		Help: "Messages refused where the fleet keeps something a coordinator acts on, by kind (cancel_request, run_result, agent_revision, progress, run_input).",
	}, []string{"kind"})}
	for _, k := range refusedKinds {
		r.total.WithLabelValues(k)
	}
	r.total = register(reg, r.total)
	return r
}

// Refused counts one refused message of kind; a nil r counts nothing.
func (r *Refused) Refused(kind string) {
	if r == nil {
		return
	}
	r.total.WithLabelValues(oneOf(kind, refusedKinds...)).Inc()
}
