package workerbus

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/approvalproof"
	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// errReplayed refuses an approved call that another stored copy of it has
// already run (or is running): an approval is good for one execution,
// fleet-wide.
var errReplayed = &approvalproof.Error{Code: "replayed"}

// executionRecord is what a worker writes, once, before it runs an
// approved call: which stored call (its sequence in the calls stream)
// runs it. Every later delivery of that stored message may go on (a
// redelivery; a non-idempotent call is then claimed, so it still runs at
// most once); any other copy of the call is refused.
type executionRecord struct {
	V        int       `json:"v"`
	CallsSeq uint64    `json:"calls_seq"`
	Worker   string    `json:"worker"`
	At       time.Time `json:"at"`
}

// unwrittenRecord is recordExecution's error when the record could not be
// written or read back (the claims stream refused it, was full or could
// not be reached): the call's approval was valid, and the call does not
// run.
type unwrittenRecord struct{ err error }

func (e *unwrittenRecord) Error() string { return e.err.Error() }

func (e *unwrittenRecord) Unwrap() error { return e.err }

// recordExecution writes the execution record of the approved call stored
// at callsSeq in the calls stream, before it runs. The first record of a
// call wins (Nats-Expected-Last-Subject-Sequence 0, and the claims stream
// keeps one message per subject and refuses the next): it returns nil when
// this stored call holds the record, errReplayed when another stored copy
// does, and an *unwrittenRecord when the record could not be written or
// read (the call does not run).
func (w *Worker) recordExecution(ctx context.Context, call protocol.Call, callsSeq uint64) error {
	if callsSeq == 0 {
		return natsbus.CodedError("no_stream_sequence")
	}
	ctx, cancel := context.WithTimeout(ctx, publishTimeout)
	defer cancel()
	route, err := w.routes.Route(ctx, call.Tool)
	if err != nil {
		return &unwrittenRecord{fmt.Errorf("natsbus: finding the tool's claims stream: %w", err)}
	}
	stream, subject, err := route.Claim(call.RunID, call.CallKey)
	if err != nil {
		return err
	}
	data, err := json.Marshal(executionRecord{V: protocol.Version, CallsSeq: callsSeq, Worker: w.cfg.Name, At: w.cfg.Now().UTC()})
	if err != nil {
		return err
	}
	msg := nats.NewMsg(subject)
	msg.Data = data
	// No Nats-Msg-Id: a deduplicated copy would be acknowledged as if
	// stored. A retry after a lost PubAck finds its own record.
	_, err = natsbus.PublishRetrying(ctx, w.js, msg, jetstream.WithExpectStream(stream), jetstream.WithExpectLastSequencePerSubject(0))
	if err == nil {
		return nil
	}
	var api *jetstream.APIError
	if !errors.As(err, &api) {
		return &unwrittenRecord{fmt.Errorf("natsbus: writing the execution record: %w", err)}
	}
	// Refused: a record is there (or the stream is full).
	holder, rerr := w.readExecutionRecord(ctx, stream, subject)
	switch {
	case errors.Is(rerr, jetstream.ErrMsgNotFound):
		return &unwrittenRecord{fmt.Errorf("natsbus: writing the execution record: %w", err)}
	case rerr != nil:
		return &unwrittenRecord{fmt.Errorf("natsbus: reading the execution record: %w", rerr)}
	case holder != callsSeq:
		return errReplayed
	}
	return nil
}

// readExecutionRecord returns the calls-stream sequence named by the
// record on subject.
func (w *Worker) readExecutionRecord(ctx context.Context, stream, subject string) (uint64, error) {
	st, err := w.js.Stream(ctx, stream)
	if err != nil {
		return 0, err
	}
	m, err := st.GetLastMsgForSubject(ctx, subject)
	if err != nil {
		return 0, err
	}
	rec, err := decodeExecutionRecord(m.Data)
	if err != nil {
		// Not a record a worker wrote: the call's record is taken all
		// the same, and nothing proves this copy may run.
		return 0, nil
	}
	return rec.CallsSeq, nil
}

// decodeExecutionRecord decodes a stored execution record strictly.
func decodeExecutionRecord(data []byte) (executionRecord, error) {
	var rec executionRecord
	if len(data) > natsbus.MaxClaimBytes {
		return rec, protocol.ErrTooLarge
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rec); err != nil {
		return rec, fmt.Errorf("natsbus: execution record: %w", err)
	}
	if dec.More() {
		return rec, errors.New("natsbus: execution record: trailing data")
	}
	if rec.CallsSeq == 0 {
		return rec, errors.New("natsbus: execution record: no calls sequence")
	}
	return rec, nil
}
