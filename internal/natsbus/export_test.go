package natsbus

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"

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
	return w.claim(ctx, &Delivery{Msg: m}, call)
}

// SetStartMargin sets how long past a call's wait its start record lives,
// until the test ends. Tests that call it must not run in parallel.
func SetStartMargin(t interface{ Cleanup(func()) }, d time.Duration) {
	old := startMarginInUse
	startMarginInUse = d
	t.Cleanup(func() { startMarginInUse = old })
}

// WriteStart writes a worker's start record for the call key of run and
// tool, as a claim does.
func WriteStart(ctx context.Context, js jetstream.JetStream, s protocol.Subjects, tool protocol.ToolName, run protocol.RunID, key protocol.CallKey, worker string) error {
	subject, err := s.Start(tool, run, key)
	if err != nil {
		return err
	}
	return writeStart(ctx, js, s.StartsStream(), subject, startRecord{V: protocol.Version, Worker: worker, Nonce: protocol.NewID()})
}

// OnLeader reads agent name's revision rev (0: its newest) from the
// agents bucket's leader, as a get's "not found" is confirmed.
func (a *AgentStore) OnLeader(ctx context.Context, name string, rev uint64) ([]byte, uint64, error) {
	return a.onLeader(ctx, name, rev)
}
