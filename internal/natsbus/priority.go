package natsbus

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/pkg/protocol"
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
	// batchIdlePoll bounds how long a batch call waits, on an idle
	// worker, before the batch queue asks for it.
	batchIdlePoll = time.Second
)

// classGate is a [PullGate] that lets a tool's batch queue pull only when
// its interactive queue has nothing waiting (or batch's turn came).
type classGate struct {
	mu sync.Mutex
	// waiting: interactive calls wait, as the last interactive pull said.
	waiting bool
	// since counts the interactive calls taken since batch last took one.
	since int
	// opened is closed (and replaced) whenever the gate may have opened.
	opened chan struct{}
}

func newClassGate() *classGate {
	return &classGate{waiting: true, opened: make(chan struct{})}
}

// interactivePulled is the interactive queue's Pulled hook.
func (g *classGate) interactivePulled(took int, pending uint64) {
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
func (g *classGate) openLocked() bool { return !g.waiting || g.since >= BatchEvery }

// Admit implements [PullGate]: open, without bound, when no interactive
// call waits; open for one message when batch's turn came.
func (g *classGate) Admit() (int, bool) {
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
func (g *classGate) Wait(ctx context.Context) error {
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
func (g *classGate) Took(n int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.since = 0
}

// batchQueue is the queue of tc's batch calls, behind tc.gate.
func (w *Worker) batchQueue(tc *toolConsumer) *WorkQueue {
	return NewWorkQueue(WorkQueueConfig{
		Slots: w.sem, Settling: w.settling, MaxFetchBatch: w.cfg.MaxFetchBatch, PollWait: w.cfg.PollWait, InFlight: &w.inflight,
		Logger: w.log.With().Str(logTool, string(tc.name)).Logger(), Noun: "batch calls",
		Ensure: func(ctx context.Context) (jetstream.Consumer, error) { return w.ensureConsumer(ctx, tc.batchConfig) },
		Wait:   w.cfg.Guard.Wait,
		Gate:   tc.gate,
		// Batch calls can wait: the queue holds no slot while idle.
		IdlePoll: batchIdlePoll,
	}, func(ctx context.Context, d *Delivery) Decision { return w.process(ctx, tc, d) })
}

// classConsumerConfigs are the durable consumers of tool's interactive and
// batch calls that every worker serving tool shares.
func classConsumerConfigs(s protocol.Subjects, tool protocol.ToolName, cfg WorkerConfig) (interactive, batch jetstream.ConsumerConfig, err error) {
	for _, c := range []struct {
		class protocol.Class
		into  *jetstream.ConsumerConfig
	}{{protocol.ClassInteractive, &interactive}, {protocol.ClassBatch, &batch}} {
		durable, err := s.ClassConsumer(tool, c.class)
		if err != nil {
			return interactive, batch, err
		}
		filter, err := s.CallsOf(tool, c.class)
		if err != nil {
			return interactive, batch, err
		}
		*c.into = toolConsumerConfig(durable, tool, filter, cfg)
		if c.class == protocol.ClassBatch {
			c.into.Description = "toolfleet workers serving " + string(tool) + ": batch calls"
		}
	}
	return interactive, batch, nil
}

// toolCallsSubject is the wildcard of every call to tool, whatever its
// class and client, as discovery shows it: <prefix>.call.<tool>.>.
func toolCallsSubject(s protocol.Subjects, tool protocol.ToolName) string {
	return strings.TrimSuffix(s.Calls(), ">") + string(tool) + ".>"
}
