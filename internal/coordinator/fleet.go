package coordinator

import (
	"github.com/toolfleet/toolfleet/internal/approval"
	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/pkg/loop"
)

// Fleet is what a front end other than the ReAct loop's model needs to run
// calls exactly as the loop runs them (coordinator mcp): the live catalog, a
// dispatcher, the approval gate and the coordinator's loop settings (with
// its logger and metrics observer).
type Fleet struct {
	Catalog    loop.Catalog
	Dispatcher loop.Dispatcher
	Gate       loop.Gate
	Loop       loop.Config
}

// Fleet returns the coordinator's fleet components. The dispatcher and the
// gate are new, on the coordinator's connection; the dispatcher is closed
// (its results consumer deleted) by Close.
func (c *Coordinator) Fleet() Fleet {
	lc := c.cfg.Loop
	lc.Logger = c.cfg.Logger
	d := natsbus.NewDispatcher(c.nc, c.js, c.subjects, natsbus.DispatcherConfig{Logger: c.cfg.Logger, ShareObserver: c.shareObserver()})
	c.fleetMu.Lock()
	c.fleetDisps = append(c.fleetDisps, d)
	c.fleetMu.Unlock()
	return Fleet{
		Catalog:    c.catalog,
		Dispatcher: d,
		Gate:       approval.NewGate(c.nc, c.js, c.subjects, approval.GateConfig{Logger: c.cfg.Logger}),
		Loop:       lc,
	}
}
