package stores

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/natsbus"
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

const (
	// StartMargin is how long past the end of its coordinator's wait for
	// a call (its deadline plus grace) the call's start record is still
	// trusted to prove that nobody else holds the call (startTrusted).
	// The fleet's clocks must agree within half of it.
	StartMargin = 2 * time.Minute
)

// StartMarginInUse is StartMargin; tests shorten it.
var StartMarginInUse = StartMargin

// StartTrusted reports whether a start record stored before now still
// proves that no other record was stored before it: every record lives
// at least until its call's ResultBy plus startMarginInUse, as its writer's
// clock has it, so a subject found empty before ResultBy plus half of it
// never held one — as long as the clocks agree within half of
// startMarginInUse.
func StartTrusted(d protocol.CallDeadline, now time.Time) bool {
	return now.Before(d.ResultBy().Add(StartMarginInUse / 2))
}

// StartRecord is the body of a start record: a worker's claim (Worker) or
// a coordinator's withdrawal (Withdrawn). Nonce, random for each write,
// lets a writer whose PubAck was lost find its own record.
type StartRecord struct {
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

// WriteStart stores rec as the start record on subject (in stream) if the
// subject holds none. It returns nil when rec is the
// record — stored now, or by an earlier attempt whose PubAck was lost —,
// ErrClaimed when another record holds the call, and another error when
// it cannot tell or the server refused the record for another reason (a
// full stream): then the call must not run.
func WriteStart(ctx context.Context, js jetstream.JetStream, stream, subject string, rec StartRecord) error {
	data, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	msg := &nats.Msg{Subject: subject, Data: data, Header: nats.Header{}}
	opts := []jetstream.PublishOpt{jetstream.WithExpectStream(stream), jetstream.WithExpectLastSequencePerSubject(0)}
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, natsbus.PublishAttemptTimeout)
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
		case ctx.Err() != nil || !natsbus.Transient(err):
			return fmt.Errorf("natsbus: writing a start record: %w", err)
		}
		if !natsbus.SleepCtx(ctx, natsbus.Backoff(attempt)) {
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
