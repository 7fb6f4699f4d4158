package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolfleet/toolfleet/internal/natsbus/admission"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// MaxClientLabels bounds the distinct client label values a process
// reports; later clients are labelled OtherClient.
const MaxClientLabels = 32

// OtherClient labels the clients seen after the first MaxClientLabels.
const OtherClient = "_other"

// Shares holds a coordinator's metrics of the clients' shares of the
// tools: calls held because their client's share was full, and those
// answered rate_limited for it. It implements admission.ShareObserver.
type Shares struct {
	tools   toolLabels
	clients clientLabels
	held    *prometheus.CounterVec
	limited *prometheus.CounterVec
}

var _ admission.ShareObserver = (*Shares)(nil)

// NewShares registers the share metrics with reg.
func NewShares(reg prometheus.Registerer) *Shares {
	s := &Shares{
		held: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Subsystem: "coordinator", Name: "calls_held_total",
			Help: "Calls the calls stream refused because their client already had its share of the tool (max_msgs_per_subject) queued or running, held in the coordinator until it took them, by tool and client.",
		}, []string{"tool", "client"}),
		limited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Subsystem: "coordinator", Name: "calls_share_limited_total",
			Help: "Held calls whose deadline came near before their client's share freed: answered rate_limited, never run, by tool and client.",
		}, []string{"tool", "client"}),
	}
	s.held = register(reg, s.held)
	s.limited = register(reg, s.limited)
	return s
}

// CallHeld implements admission.ShareObserver.
func (s *Shares) CallHeld(tool protocol.ToolName, client string) {
	s.held.WithLabelValues(s.tools.label(string(tool)), s.clients.label(client)).Inc()
}

// CallShareLimited implements admission.ShareObserver.
func (s *Shares) CallShareLimited(tool protocol.ToolName, client string) {
	s.limited.WithLabelValues(s.tools.label(string(tool)), s.clients.label(client)).Inc()
}

// clientLabels bounds the client label's values: the first
// MaxClientLabels clients seen, then OtherClient.
type clientLabels struct {
	mu   sync.Mutex
	seen map[string]struct{}
}

func (l *clientLabels) label(client string) string {
	if !protocol.ValidToken(client) {
		return InvalidLabel
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.seen[client]; ok {
		return client
	}
	if l.seen == nil {
		l.seen = map[string]struct{}{}
	}
	if len(l.seen) >= MaxClientLabels {
		return OtherClient
	}
	l.seen[client] = struct{}{}
	return client
}
