package workerbus

import (
	"context"
	"errors"
	"fmt"

	"github.com/toolfleet/toolfleet/internal/natsbus/stores"
	"github.com/toolfleet/toolfleet/internal/natsbus/workqueue"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// claim makes this delivery of a non-idempotent call the only one that
// runs it, before the tool starts, by writing the call's start record
// (see writeStart): of two deliveries of one call (a redelivery after the
// first worker stalled past the ack wait, a copy stored under another
// Nats-Msg-Id) and of a claim and the coordinator's withdrawal, exactly one
// record is stored. An acknowledgement cannot decide it: the server
// confirms an ack of a message that another delivery has already
// acknowledged. Once the record is stored, or another is, the delivery is
// acknowledged, so the message leaves the work queue; a lost ack lets the
// server deliver it again, and that delivery finds the record. It returns
// ErrClaimed when another record holds the call, and another error when
// the record could not be written or it cannot tell: the message is left
// to be redelivered after the ack wait (and claimed again, finding its
// record if it was stored) and the call does not run here.
func (w *Worker) claim(ctx context.Context, d *workqueue.Delivery, call protocol.Call) error {
	// Not cut short by the worker stopping: a claim stored must be known.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ackTimeout)
	defer cancel()
	route, err := w.routes.Route(ctx, call.Tool)
	if err != nil {
		return fmt.Errorf("natsbus: finding the tool's starts stream: %w", err)
	}
	stream, subject, err := route.Start(call.RunID, call.CallKey)
	if err != nil {
		return err
	}
	err = stores.WriteStart(ctx, w.js, stream, subject,
		stores.StartRecord{V: protocol.Version, Worker: w.cfg.Name, Nonce: protocol.NewID()})
	if err == nil || errors.Is(err, stores.ErrClaimed) {
		workqueue.Settle(d.Msg, workqueue.Ack)
	}
	return err
}
