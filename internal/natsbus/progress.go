package natsbus

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// Progress of running calls travels on core NATS, bounded at both ends.
// A worker publishes at most ProgressRate reports a second per call (after
// a burst of as many), each at most protocol.MaxProgressBytes; the rest are
// dropped and counted in the next report, and the last one dropped is
// published when the call ends, so the final state is seen. A coordinator
// passes on at most RunProgressRate reports a second per run and holds at
// most progressPending undelivered ones. Nothing waits for progress: a
// flood costs the tool neither time nor the fleet memory.
const (
	// ProgressRate bounds the reports a worker publishes per call and
	// second.
	ProgressRate = 10
	// RunProgressRate bounds the reports a coordinator passes on per run
	// and second.
	RunProgressRate = 50
	// progressPending bounds the reports a coordinator's subscription
	// holds before its callback takes them (a slow consumer drops more).
	progressPending = 1024
)

// rateBucket is a token bucket: rate tokens a second, at most rate at once.
type rateBucket struct {
	rate   float64
	tokens float64
	last   time.Time
}

func newRateBucket(rate int, now time.Time) rateBucket {
	return rateBucket{rate: float64(rate), tokens: float64(rate), last: now}
}

// take reports whether a token was there, and takes it.
func (b *rateBucket) take(now time.Time) bool {
	b.tokens = min(b.rate, b.tokens+now.Sub(b.last).Seconds()*b.rate)
	b.last = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// callProgress publishes one call's progress reports.
type callProgress struct {
	nc      *nats.Conn
	subject string
	base    protocol.Progress

	mu      sync.Mutex
	seq     uint64
	dropped uint64
	limit   rateBucket
	pending string // the last report dropped, published at the end
	ended   bool
}

// withProgress returns ctx carrying a progress sink for call, for the
// harness, and the function that ends it once the call is over.
func (w *Worker) withProgress(ctx context.Context, call protocol.Call) (context.Context, func()) {
	subject, err := w.subjects.Progress(call.RunID, call.CallKey)
	if err != nil {
		return ctx, func() {}
	}
	p := &callProgress{
		nc: w.nc, subject: subject, limit: newRateBucket(ProgressRate, time.Now()),
		base: protocol.Progress{V: protocol.Version, RunID: call.RunID, CallKey: call.CallKey, Tool: call.Tool, Worker: w.cfg.Name},
	}
	return harness.WithProgress(ctx, p.report), p.end
}

func (p *callProgress) report(msg string) {
	msg = harness.ClipProgress(msg)
	if msg == "" {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ended {
		return // a Go tool still running past its call
	}
	p.seq++
	if !p.limit.take(time.Now()) {
		p.dropped++
		p.pending = msg
		return
	}
	p.pending = ""
	p.publish(msg)
}

// end publishes the last report dropped, if the last one was, and stops
// publishing.
func (p *callProgress) end() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ended {
		return
	}
	p.ended = true
	if p.pending != "" {
		p.dropped--
		p.publish(p.pending)
	}
}

// publish sends report seq (core NATS, best effort). Called with mu held.
func (p *callProgress) publish(msg string) {
	m := p.base
	m.Seq, m.Message, m.Dropped = p.seq, msg, p.dropped
	data, err := protocol.Encode(&m)
	if err != nil {
		return
	}
	_ = p.nc.Publish(p.subject, data)
}

// followProgress subscribes the inbox to the progress reports of the run's
// calls when ctx carries a sink (loop.WithProgress), and passes them on at
// most RunProgressRate a second. Reports are decoded, checked against
// their subject, run and the tool of their call (foreign, when set, is told
// of each report that names another tool), and never enter the inbox's events: a flood of
// them cannot crowd out a result.
func (in *Inbox) followProgress(ctx context.Context, nc *nats.Conn, subjects protocol.Subjects, foreign func()) error {
	f := loop.ProgressFrom(ctx)
	if f == nil {
		return nil
	}
	wildcard, err := subjects.ProgressOf(in.run)
	if err != nil {
		return fmt.Errorf("natsbus: run id: %w", err)
	}
	prefix := wildcard[:len(wildcard)-1]
	var mu sync.Mutex
	b := newRateBucket(RunProgressRate, time.Now())
	var dropped atomic.Int64
	sub, err := nc.Subscribe(wildcard, func(m *nats.Msg) {
		p, err := protocol.DecodeProgress(m.Data, protocol.MaxProgressBytes*4)
		if err == nil && (p.RunID != in.run || m.Subject != prefix+string(p.CallKey)) {
			err = codedError("subject_mismatch")
		}
		// Only the call's own tool reports its progress: a report that
		// names another tool (or none) for a call of this run is dropped.
		if tool, ok := in.tools.Load(p.CallKey); err == nil && ok && tool.(protocol.ToolName) != p.Tool {
			err = codedError("foreign_tool")
			if foreign != nil {
				foreign()
			}
		}
		if err != nil {
			in.refuse(m.Subject, err)
			return
		}
		p.CallID, p.Tool = "", "" // the loop names the call
		mu.Lock()
		ok := b.take(time.Now())
		mu.Unlock()
		if !ok {
			if n := dropped.Add(1); n == 1 || n%1000 == 0 {
				in.log.Debug().Int64(logDropped, n).Msg("progress over the run's rate: dropped")
			}
			return
		}
		f(p)
	})
	if err != nil {
		return fmt.Errorf("natsbus: subscribing to %s: %w", wildcard, err)
	}
	_ = sub.SetPendingLimits(progressPending, progressPending*protocol.MaxProgressBytes*4)
	in.progressSub = sub
	return nil
}
