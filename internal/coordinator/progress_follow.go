package coordinator

import (
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// followPending bounds the reports a follower's subscription holds before
// f takes them; a slow f loses the rest.
const followPending = 256

// FollowProgress passes the progress reports of a submitted run to f, as
// its client receives them ([protocol.Subjects.ClientRunProgress]; client
// "" for a run submitted on the shared subject), until stop is called. It
// is what a waiting submitter ("coordinator submit --wait") shows:
//
//	stop, err := coordinator.FollowProgress(nc, subjects, client, runID, display.Progress)
//
// Reports are core NATS: those sent before the subscription, or while the
// connection is down, are not seen. Undecodable or foreign ones are
// dropped; f must not block.
func FollowProgress(nc *nats.Conn, subjects protocol.Subjects, client string, run protocol.RunID, f loop.ProgressFunc) (stop func(), err error) {
	subject, err := subjects.ClientRunProgress(client, run)
	if err != nil {
		return nil, err
	}
	sub, err := nc.Subscribe(subject, func(m *nats.Msg) {
		p, err := protocol.DecodeProgress(m.Data, protocol.MaxProgressBytes*4)
		if err != nil || p.RunID != run {
			return
		}
		f(p)
	})
	if err != nil {
		return nil, fmt.Errorf("coordinator: following the progress of run %s: %w", run, err)
	}
	_ = sub.SetPendingLimits(followPending, followPending*protocol.MaxProgressBytes*4)
	return func() { _ = sub.Unsubscribe() }, nil
}
