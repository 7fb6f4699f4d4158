package workerbus

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolfleet/toolfleet/internal/natsbus/admission"
	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

const (
	// ProgressRate bounds the reports a worker publishes per call and
	// second.
	ProgressRate = 10
)

// callProgress publishes one call's progress reports.
type callProgress struct {
	nc       *nats.Conn
	subjects protocol.Subjects
	base     protocol.Progress

	mu      sync.Mutex
	seq     uint64
	dropped uint64
	limit   admission.RateBucket
	pending string // the last report dropped, published at the end
	ended   bool
}

// withProgress returns ctx carrying a progress sink for call, for the
// harness, and the sink, to end once the call is over.
func (w *Worker) withProgress(ctx context.Context, call protocol.Call) (context.Context, *callProgress) {
	p := &callProgress{
		nc: w.nc, subjects: w.subjects, limit: admission.NewRateBucket(ProgressRate, time.Now()),
		base: protocol.Progress{V: protocol.Version, RunID: call.RunID, CallKey: call.CallKey, Tool: call.Tool, Worker: w.cfg.Name},
	}
	return harness.WithProgress(ctx, p.report), p
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
	if !p.limit.Take(time.Now()) {
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

// publish sends report seq (core NATS, best effort) on the call's
// progress subject, made at the first report: most calls make none.
// Called with mu held.
func (p *callProgress) publish(msg string) {
	subject, err := p.subjects.Progress(p.base.RunID, p.base.CallKey)
	if err != nil {
		return
	}
	m := p.base
	m.Seq, m.Message, m.Dropped = p.seq, msg, p.dropped
	data, err := protocol.Encode(&m)
	if err != nil {
		return
	}
	_ = p.nc.Publish(subject, data)
}
