package runner

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolfleet/toolfleet/internal/metrics"
	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natsbus/admission"
	"github.com/toolfleet/toolfleet/internal/natsbus/stores"
)

// runnerMetrics are a runner's collectors, registered with
// Config.Registerer.
type runnerMetrics struct {
	coord   *metrics.Coordinator
	streams *metrics.Streams
	shares  *metrics.Shares
}

// newRunnerMetrics registers the runner's metrics with reg; nil without
// one.
func newRunnerMetrics(reg prometheus.Registerer) *runnerMetrics {
	if reg == nil {
		return nil
	}
	return &runnerMetrics{coord: metrics.NewCoordinator(reg), streams: metrics.NewStreams(reg), shares: metrics.NewShares(reg)}
}

// The observers below are nil interfaces, not nil pointers in one,
// without metrics.

func (m *runnerMetrics) streamsObserver() natsbus.StreamGuardObserver {
	if m == nil {
		return nil
	}
	return m.streams
}

func (m *runnerMetrics) catalogObserver() stores.CatalogObserver {
	if m == nil {
		return nil
	}
	return m.coord
}

func (m *runnerMetrics) shareObserver() admission.ShareObserver {
	if m == nil {
		return nil
	}
	return m.shares
}
