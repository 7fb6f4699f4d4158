package natsbus

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// A non-idempotent call runs at most once because of its start record:
// <prefix>.start.<tool>.<run>.<key> in the starts stream (FLEET_STARTS),
// written with Nats-Expected-Last-Subject-Sequence 0, so the server stores
// one per call, the first to arrive, and refuses every later one (and the
// stream keeps one message per subject and refuses the next even without
// the header). The worker about to run the call writes its claim there;
// the call's coordinator, at the deadline of a call still unanswered,
// writes its withdrawal there. Whoever's record is stored holds the call:
// of two deliveries of it, of two stored copies of it, of a claim and a
// withdrawal, exactly one wins. A record is an ordinary publish — no
// JetStream API request — and the claimed delivery is then acknowledged.
//
// A record lives the stream's MaxAge, the calls stream's plus an hour:
// longer than a call's message can stay in the calls stream, so longer
// than any worker can be handed the call, and by then no worker can start
// it: a worker runs a call only if, once its claim is stored, the call's
// deadline has not passed (by its clock), and answers one it did not run
// only while its claim is still proof that nobody else holds the call
// (startTrusted). The stream takes no per-message TTL: the server refuses
// a record that carries one ("Nats-TTL: never" too, which would outlive
// MaxAge), so whatever a worker writes ages out with the stream's MaxAge.

// Bounds of the starts stream.
const (
	// DefaultStartsMaxBytes bounds a starts stream
	// (StreamConfig.StartsMaxBytes). Full, it refuses new records
	// (discard new): a claim is refused and the call does not run, and is
	// withdrawn or answered outcome_unknown at its deadline. A record
	// takes about 250 bytes and lives the stream's MaxAge (the calls
	// stream's plus an hour: 2h by default), so 1 GiB holds the records
	// of about 600 non-idempotent calls a second, sustained.
	DefaultStartsMaxBytes = 1 << 30
	// MaxStartBytes bounds one stored start record, headers included.
	MaxStartBytes = 1 << 10
	// StartsAfterCalls is how much longer than the calls stream's MaxAge
	// the starts stream keeps a record at most.
	StartsAfterCalls = time.Hour
	// StartMargin is how long past the end of its coordinator's wait for
	// a call (its deadline plus grace) the call's start record is still
	// trusted to prove that nobody else holds the call (startTrusted).
	// The fleet's clocks must agree within half of it.
	StartMargin = 2 * time.Minute
)

// startMarginInUse is StartMargin; tests shorten it.
var startMarginInUse = StartMargin

// startsStream is the expected configuration of the starts stream.
func startsStream(s protocol.Subjects, c StreamConfig) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:                 s.StartsStream(),
		Description:          "toolfleet start records of non-idempotent calls: a worker's claim or the coordinator's withdrawal, one per call",
		Subjects:             []string{s.Starts()},
		Retention:            jetstream.LimitsPolicy,
		Storage:              jetstream.FileStorage,
		Replicas:             c.Replicas,
		MaxAge:               c.CallsMaxAge + StartsAfterCalls,
		MaxMsgs:              -1,
		MaxBytes:             c.StartsMaxBytes,
		MaxMsgsPerSubject:    1,
		MaxMsgSize:           MaxStartBytes,
		Discard:              jetstream.DiscardNew,
		DiscardNewPerSubject: true,
		Duplicates:           DuplicateWindow,
		// No per-message TTL (AllowMsgTTL false): the server refuses a
		// record with Nats-TTL, so none outlives MaxAge.
		// Workers write the records: read with STREAM.MSG.GET (see
		// noDirect).
		AllowDirect: false,
		DenyDelete:  true,
	}
}

// startTrusted reports whether a start record stored before now still
// proves that no other record was stored before it: every record lives
// at least until its call's ResultBy plus startMarginInUse, as its writer's
// clock has it, so a subject found empty before ResultBy plus half of it
// never held one — as long as the clocks agree within half of
// startMarginInUse.
func startTrusted(d protocol.CallDeadline, now time.Time) bool {
	return now.Before(d.ResultBy().Add(startMarginInUse / 2))
}

// startRecord is the body of a start record: a worker's claim (Worker) or
// a coordinator's withdrawal (Withdrawn). Nonce, random for each write,
// lets a writer whose PubAck was lost find its own record.
type startRecord struct {
	V         int    `json:"v"`
	Worker    string `json:"worker,omitempty"`
	Withdrawn bool   `json:"withdrawn,omitempty"`
	Nonce     string `json:"nonce"`
}

// JetStream's refusals of a publish whose
// Nats-Expected-Last-Subject-Sequence does not hold: a record is stored,
// or (a clustered stream) another message of the subject is being stored.
const (
	errCodeWrongLastSequence         jetstream.ErrorCode = 10071
	errCodeWrongLastSequenceInFlight jetstream.ErrorCode = 10164
)

// writeStart stores rec as the start record on subject (in stream) if the
// subject holds none. It returns nil when rec is the
// record — stored now, or by an earlier attempt whose PubAck was lost —,
// ErrClaimed when another record holds the call, and another error when
// it cannot tell or the server refused the record for another reason (a
// full stream): then the call must not run.
func writeStart(ctx context.Context, js jetstream.JetStream, stream, subject string, rec startRecord) error {
	data, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	msg := &nats.Msg{Subject: subject, Data: data, Header: nats.Header{}}
	opts := []jetstream.PublishOpt{jetstream.WithExpectStream(stream), jetstream.WithExpectLastSequencePerSubject(0)}
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, publishAttemptTimeout)
		_, err := js.PublishMsg(actx, msg, opts...)
		cancel()
		if err == nil {
			return nil
		}
		var api *jetstream.APIError
		refused := errors.As(err, &api) && (api.ErrorCode == errCodeWrongLastSequence || api.ErrorCode == errCodeWrongLastSequenceInFlight)
		switch {
		case refused && attempt == 1:
			// Nothing of ours was sent before: another record is stored,
			// or being stored. (Should that one fail to be stored, nobody
			// holds the call, and nobody runs it.)
			return ErrClaimed
		case refused && api.ErrorCode == errCodeWrongLastSequenceInFlight:
			// Maybe our own earlier attempt, still being stored: ask
			// again, and read the record once it is stored.
			err = nil
		case refused:
			switch mine, rerr := OwnStart(ctx, js, stream, msg); {
			case rerr != nil:
				return fmt.Errorf("natsbus: reading a start record: %w", rerr)
			case mine:
				return nil
			}
			return ErrClaimed
		case ctx.Err() != nil || !transient(err):
			return fmt.Errorf("natsbus: writing a start record: %w", err)
		}
		if !sleepCtx(ctx, backoff(attempt)) {
			if err == nil {
				err = ctx.Err()
			}
			return fmt.Errorf("natsbus: writing a start record: %w", err)
		}
	}
}

// OwnStart reports whether the record stored on msg's subject is msg
// itself: the same body (its nonce). A copy of msg that someone else
// stored first holds the call exactly as msg would have.
func OwnStart(ctx context.Context, js jetstream.JetStream, stream string, msg *nats.Msg) (bool, error) {
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return false, err
	}
	m, err := st.GetLastMsgForSubject(ctx, msg.Subject)
	if err != nil {
		return false, err
	}
	return bytes.Equal(m.Data, msg.Data), nil
}

// ErrClaimed refuses a non-idempotent call whose start record another
// delivery (or the coordinator's withdrawal) wrote.
var ErrClaimed = errors.New("natsbus: the call was claimed by another delivery, or withdrawn")

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
func (w *Worker) claim(ctx context.Context, d *Delivery, call protocol.Call) error {
	// Not cut short by the worker stopping: a claim stored must be known.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ackTimeout)
	defer cancel()
	route, err := w.routes.route(ctx, call.Tool)
	if err != nil {
		return fmt.Errorf("natsbus: finding the tool's starts stream: %w", err)
	}
	stream, subject, err := route.start(call.RunID, call.CallKey)
	if err != nil {
		return err
	}
	err = writeStart(ctx, w.js, stream, subject,
		startRecord{V: protocol.Version, Worker: w.cfg.Name, Nonce: protocol.NewID()})
	if err == nil || errors.Is(err, ErrClaimed) {
		settle(d.Msg, Ack)
	}
	return err
}

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
var errTooLate = codedError("withdrawal_too_late")

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
	tool, known := in.tools.Load(key)
	if !ok || !known || in.callsStream == nil || in.js == nil {
		return false, codedError("no_stream_sequence")
	}
	pc := v.(publishedCall)
	route, err := routeOf(ctx, in.js, in.subjects, tool.(protocol.ToolName))
	if err != nil {
		return false, fmt.Errorf("natsbus: finding the tool's starts stream: %w", err)
	}
	stream, subject, err := route.start(in.run, key)
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
	err = writeStart(ctx, in.js, stream, subject,
		startRecord{V: protocol.Version, Withdrawn: true, Nonce: protocol.NewID()})
	switch {
	case errors.Is(err, ErrClaimed):
		return false, nil
	case err != nil:
		return false, err
	case !startTrusted(pc.deadline, time.Now()):
		return false, errTooLate
	}
	return !gone, nil
}
