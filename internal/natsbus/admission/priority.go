package admission

import (
	"context"
	"sync"
	"time"
)

// Priority between a tool's interactive and batch calls.
//
// Each class of a tool has its own durable consumer in the calls stream
// (tool_<tool> on <prefix>.call.<tool>.interactive.*, batch_<tool> on
// <prefix>.call.<tool>.batch.*), and a worker serves both from the same
// slots. The interactive queue pulls as every queue does; the batch queue
// goes through a classGate:
//
//   - It pulls only while no interactive call of the tool waits, as the
//     interactive queue's last pull said (the NumPending of its last
//     message, or an empty pull): no extra round trip. Until that queue's
//     first pull, interactive calls are assumed to wait.
//   - It checks the gate once it holds a free slot, and gives the slot
//     back when the gate is shut, so a slot that frees goes to the
//     interactive queue.
//   - It never waits in the server (WorkQueueConfig.IdlePoll): idle, it
//     holds no slot, and asks again within batchIdlePoll (about one
//     no-wait pull a second per tool), so a fleet that uses one class only
//     loses neither a slot nor a round trip per call.
//
// Bound for batch: while interactive calls keep waiting, the gate still
// lets the batch queue take one call after every BatchEvery interactive
// calls the worker took, so batch calls get at least 1 in BatchEvery+1 of
// the tool's starts on each worker and are never starved.
//
// What it does not order: an interactive call published while the batch
// queue's pull is already under way (or between the interactive queue's
// pulls, when every slot is busy) may start after the batch calls that
// pull took — at most one pull, bounded by the free slots.

const (
	// BatchEvery is how many interactive calls a worker takes, while
	// others wait, before it lets one batch call of the same tool start.
	BatchEvery = 8
	// BatchIdlePoll bounds how long a batch call waits, on an idle
	// worker, before the batch queue asks for it.
	BatchIdlePoll = time.Second
)

// ClassGate is a [PullGate] that lets a tool's batch queue pull only when
// its interactive queue has nothing waiting (or batch's turn came).
type ClassGate struct {
	mu sync.Mutex
	// waiting: interactive calls wait, as the last interactive pull said.
	waiting bool
	// since counts the interactive calls taken since batch last took one.
	since int
	// opened is closed (and replaced) whenever the gate may have opened.
	opened chan struct{}
}

// NewClassGate returns a gate that holds batch calls back until the
// interactive queue's first pull says none waits.
func NewClassGate() *ClassGate {
	return &ClassGate{waiting: true, opened: make(chan struct{})}
}

// InteractivePulled is the interactive queue's Pulled hook.
func (g *ClassGate) InteractivePulled(took int, pending uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.waiting = pending > 0
	g.since += took
	if g.openLocked() {
		close(g.opened)
		g.opened = make(chan struct{})
	}
}

// openLocked: no interactive call waits, or batch's turn came.
func (g *ClassGate) openLocked() bool { return !g.waiting || g.since >= BatchEvery }

// Admit implements [PullGate]: open, without bound, when no interactive
// call waits; open for one message when batch's turn came.
func (g *ClassGate) Admit() (int, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case !g.waiting:
		return 0, true
	case g.since >= BatchEvery:
		return 1, true
	}
	return 0, false
}

// Wait implements [PullGate].
func (g *ClassGate) Wait(ctx context.Context) error {
	for {
		g.mu.Lock()
		open, ch := g.openLocked(), g.opened
		g.mu.Unlock()
		if open {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Took implements [PullGate]: the batch queue took n calls.
func (g *ClassGate) Took(n int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.since = 0
}
