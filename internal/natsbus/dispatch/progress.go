package dispatch

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natsbus/admission"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

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
	b := admission.NewRateBucket(admission.RunProgressRate, time.Now())
	var dropped atomic.Int64
	sub, err := nc.Subscribe(wildcard, func(m *nats.Msg) {
		p, err := protocol.DecodeProgress(m.Data, protocol.MaxProgressBytes*4)
		if err == nil && (p.RunID != in.run || m.Subject != prefix+string(p.CallKey)) {
			err = natsbus.CodedError("subject_mismatch")
		}
		// Only the call's own tool reports its progress: a report that
		// names another tool (or none) for a call of this run is dropped.
		if tool, ok := in.tools.load(p.CallKey); err == nil && ok && tool != p.Tool {
			err = natsbus.CodedError("foreign_tool")
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
		ok := b.Take(time.Now())
		mu.Unlock()
		if !ok {
			if n := dropped.Add(1); n == 1 || n%1000 == 0 {
				in.log.Debug().Int64(natsbus.LogDropped, n).Msg("progress over the run's rate: dropped")
			}
			return
		}
		f(p)
	})
	if err != nil {
		return fmt.Errorf("natsbus: subscribing to %s: %w", wildcard, err)
	}
	_ = sub.SetPendingLimits(admission.ProgressPending, admission.ProgressPending*protocol.MaxProgressBytes*4)
	in.progressSub = sub
	return nil
}
