package serve

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolfleet/toolfleet/internal/metrics"
	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natsbus/admission"
	"github.com/toolfleet/toolfleet/internal/natsbus/stores"
)

// serverMetrics are a server's collectors, registered with
// Config.Registerer.
type serverMetrics struct {
	coord   *metrics.Coordinator
	streams *metrics.Streams
	agents  *metrics.Agents
	shares  *metrics.Shares
	refused *metrics.Refused
}

// newServerMetrics registers the server's metrics with reg; nil without
// one.
func newServerMetrics(reg prometheus.Registerer) *serverMetrics {
	if reg == nil {
		return nil
	}
	return &serverMetrics{
		coord: metrics.NewCoordinator(reg), streams: metrics.NewStreams(reg), agents: metrics.NewAgents(reg),
		shares: metrics.NewShares(reg), refused: metrics.NewRefused(reg),
	}
}

// The observers below are nil interfaces, not nil pointers in one,
// without metrics.

func (m *serverMetrics) streamsObserver() natsbus.StreamGuardObserver {
	if m == nil {
		return nil
	}
	return m.streams
}

func (m *serverMetrics) catalogObserver() stores.CatalogObserver {
	if m == nil {
		return nil
	}
	return m.coord
}

func (m *serverMetrics) shareObserver() admission.ShareObserver {
	if m == nil {
		return nil
	}
	return m.shares
}

func (m *serverMetrics) agentsMetrics() *metrics.Agents {
	if m == nil {
		return nil
	}
	return m.agents
}

// refused counts a message of kind the server refused to act on
// (metrics.Refused*), when it has metrics.
func (s *Server) refused(kind string) {
	if s.metrics != nil {
		s.metrics.refused.Refused(kind)
	}
}
