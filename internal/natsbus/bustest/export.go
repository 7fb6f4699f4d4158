package bustest

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/natsbus/stores"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// SetStartMargin sets how long past a call's wait its start record lives,
// until the test ends. Tests that call it must not run in parallel.
func SetStartMargin(t interface{ Cleanup(func()) }, d time.Duration) {
	old := stores.StartMarginInUse
	stores.StartMarginInUse = d
	t.Cleanup(func() { stores.StartMarginInUse = old })
}

// WriteStart writes a worker's start record for the call key of run and
// tool, as a claim does.
func WriteStart(ctx context.Context, js jetstream.JetStream, s protocol.Subjects, tool protocol.ToolName, run protocol.RunID, key protocol.CallKey, worker string) error {
	subject, err := s.Start(tool, run, key)
	if err != nil {
		return err
	}
	return stores.WriteStart(ctx, js, s.StartsStream(), subject, stores.StartRecord{V: protocol.Version, Worker: worker, Nonce: protocol.NewID()})
}
