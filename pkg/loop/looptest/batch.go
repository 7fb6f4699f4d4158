package looptest

import (
	"context"
	"sync"

	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// Batcher is a [Dispatcher] that also implements [loop.BatchDispatcher]:
// each batch is published call by call with Publish, and recorded.
type Batcher struct {
	*Dispatcher

	mu      sync.Mutex
	batches [][]protocol.Call
}

var _ loop.BatchDispatcher = (*Batcher)(nil)

// NewBatcher returns a Batcher over a Dispatcher running handler.
func NewBatcher(handler Handler) *Batcher { return &Batcher{Dispatcher: New(handler)} }

// PublishBatch implements [loop.BatchDispatcher].
func (b *Batcher) PublishBatch(ctx context.Context, calls []loop.Outgoing) []error {
	batch := make([]protocol.Call, len(calls))
	errs := make([]error, len(calls))
	for i, o := range calls {
		batch[i] = o.Call
		errs[i] = b.Publish(ctx, o)
	}
	b.mu.Lock()
	b.batches = append(b.batches, batch)
	b.mu.Unlock()
	return errs
}

// Batches returns the calls of every batch published so far, in order.
func (b *Batcher) Batches() [][]protocol.Call {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([][]protocol.Call, len(b.batches))
	copy(out, b.batches)
	return out
}
