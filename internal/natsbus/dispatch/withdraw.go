package dispatch

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natsbus/stores"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// published records where the calls stream stored a call of the inbox's
// run and its deadline, for [Inbox.Withdraw].
func (in *Inbox) published(call protocol.Call, seq uint64) {
	in.seqs.Store(call.CallKey, publishedCall{seq: seq, deadline: call.CallDeadline()})
}

// publishedCall is where a call of the run is stored, and its deadline.
type publishedCall struct {
	seq      uint64
	deadline protocol.CallDeadline
}

// errTooLate refuses a withdrawal asked for so long after the call's
// deadline that a worker's claim could have expired already.
var errTooLate = natsbus.CodedError("withdrawal_too_late")

// Withdraw implements [loop.WithdrawInbox]: it removes the call's message
// from the calls stream, at the sequence its PubAck gave, so that no
// worker is handed it any more, then writes the call's withdrawal as its
// start record (see claim), so that no worker holding a delivery of it
// runs it. It reports true when both held: no worker will run the call.
// It reports false when a worker's claim is stored first (the call may
// have run), or when the message was gone already (a worker of an earlier
// build claimed it by removing it), and an error when it cannot tell: the
// call's PubAck was not seen or it was not published under
// loop.WithAtMostOnce (the loop withdraws only those), the server did not
// answer or refused the record (a full starts stream), or the call's
// deadline is so long past that a claim could have expired (startTrusted).
func (in *Inbox) Withdraw(ctx context.Context, key protocol.CallKey) (bool, error) {
	v, ok := in.seqs.LoadAndDelete(key)
	tool, known := in.tools.load(key)
	if !ok || !known || in.callsStream == nil || in.js == nil {
		return false, natsbus.CodedError("no_stream_sequence")
	}
	pc := v.(publishedCall)
	route, err := stores.RouteOf(ctx, in.js, in.subjects, tool)
	if err != nil {
		return false, fmt.Errorf("natsbus: finding the tool's starts stream: %w", err)
	}
	stream, subject, err := route.Start(in.run, key)
	if err != nil {
		return false, err
	}
	st, err := in.callsStream(ctx)
	if err != nil {
		return false, err
	}
	gone := false
	switch err := st.DeleteMsg(ctx, pc.seq); {
	case errors.Is(err, jetstream.ErrMsgDeleteUnsuccessful):
		gone = true
	case err != nil:
		return false, err
	}
	err = stores.WriteStart(ctx, in.js, stream, subject,
		stores.StartRecord{V: protocol.Version, Withdrawn: true, Nonce: protocol.NewID()})
	switch {
	case errors.Is(err, stores.ErrClaimed):
		return false, nil
	case err != nil:
		return false, err
	case !stores.StartTrusted(pc.deadline, time.Now()):
		return false, errTooLate
	}
	return !gone, nil
}
