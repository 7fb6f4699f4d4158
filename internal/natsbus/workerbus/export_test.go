package workerbus

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/natsbus/workqueue"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// ResultsInFlight reports the worker's results published in their own
// message whose first attempt has not ended, and those waiting for a
// message to carry them (a batch).
func (w *Worker) ResultsInFlight() (alone, waiting int) {
	return int(w.resultsAlone.Load()), w.resultLanes.waiting()
}

// ClaimDelivery claims m, a delivery of call, as the worker does before it
// runs a non-idempotent call (claim.go): nil when this delivery holds the
// call, ErrClaimed when another record does.
func (w *Worker) ClaimDelivery(ctx context.Context, m jetstream.Msg, call protocol.Call) error {
	return w.claim(ctx, &workqueue.Delivery{Msg: m}, call)
}
