package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolfleet/toolfleet/internal/natsbus"
)

// Streams holds the stream configuration check's metrics. It implements
// natsbus.StreamGuardObserver; several guards of one process may share it.
type Streams struct {
	mu      sync.Mutex
	drift   *prometheus.GaugeVec
	checks  *prometheus.CounterVec
	current map[[2]string]bool
}

var _ natsbus.StreamGuardObserver = (*Streams)(nil)

// NewStreams registers toolfleet_stream_config_drift (1 per stream and
// field that differs from the expected configuration, 0 once it no longer
// does) and toolfleet_stream_config_checks_total (checks by result: ok,
// drift) with reg.
func NewStreams(reg prometheus.Registerer) *Streams {
	s := &Streams{
		drift: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "stream_config_drift",
			Help: "1 while the stream's field differs from the fleet's expected configuration (the process refuses to serve), 0 once it no longer does.",
		}, []string{"stream", "field"}),
		checks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "stream_config_checks_total",
			Help: "Checks of the fleet's stream configuration, by result (ok, drift).",
		}, []string{"result"}),
		current: map[[2]string]bool{},
	}
	s.drift = register(reg, s.drift)
	s.checks = register(reg, s.checks)
	return s
}

// StreamsChecked records one check: the drifts found set their gauge to 1,
// the drifts of the same streams that are gone to 0.
func (s *Streams) StreamsChecked(expected []string, drifts []natsbus.Drift) {
	s.mu.Lock()
	defer s.mu.Unlock()
	checked := map[string]bool{}
	for _, name := range expected {
		checked[name] = true
	}
	now := map[[2]string]bool{}
	for _, d := range drifts {
		now[[2]string{d.Stream, d.Field}] = true
		s.drift.WithLabelValues(d.Stream, d.Field).Set(1)
	}
	for k := range s.current {
		if checked[k[0]] && !now[k] {
			s.drift.WithLabelValues(k[0], k[1]).Set(0)
			delete(s.current, k)
		}
	}
	for k := range now {
		s.current[k] = true
	}
	if len(drifts) == 0 {
		s.checks.WithLabelValues("ok").Inc()
	} else {
		s.checks.WithLabelValues("drift").Inc()
	}
}
