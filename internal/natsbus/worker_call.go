package natsbus

import (
	"context"
	"errors"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// Term reasons, visible in the server's terminated-message advisories.
const (
	termMalformed = "malformed"
	termExpired   = "expired"
)

// errExpired refuses a call whose deadline has passed.
var errExpired = errors.New("natsbus: call deadline passed")

// process handles one delivered call from acceptance to its result, and
// says how its message is settled.
func (w *Worker) process(ctx context.Context, tc *toolConsumer, d *Delivery) Decision {
	m, attempt, seq := d.Msg, d.Attempt, d.Seq // seq: the call's message in the calls stream
	tc.meter.onDelivered(attempt)
	call, replyTo, err := w.accept(tc, m)
	switch {
	case errors.Is(err, errExpired):
		w.expired.Add(1)
		tc.meter.onTerminated(TerminatedExpired)
		w.log.Info().Str(logTool, tc.name).Str(logRun, call.RunID).Str(logCallKey, call.CallKey).
			Int(logAttempt, attempt).Msg("call expired before it started: not run")
		return Term(termExpired)
	case err != nil:
		w.malformed.Add(1)
		tc.meter.onTerminated(TerminatedMalformed)
		w.limited.Warn().Str(logSubject, m.Subject()).Str(logCode, errorCode(err)).Msg("terminated a malformed call")
		return Term(termMalformed)
	}
	log := w.log.With().Str(logTool, tc.name).Str(logRun, call.RunID).Str(logCallKey, call.CallKey).
		Int(logAttempt, attempt).Logger()

	if tc.idempotent {
		// The server redelivers a call whose heartbeats it missed for the
		// ack wait (a stalled process or link), maybe to this worker. The
		// attempt running here heartbeats and acknowledges the same stream
		// message, which covers the new delivery too: it is not run twice
		// side by side.
		if !w.begin(call.RunID, call.CallKey, seq) {
			log.Info().Msg("call redelivered while it runs here: not run again")
			return Leave // the attempt running here settles the message
		}
		defer w.end(call.RunID, call.CallKey, seq)
	} else {
		// At most once: the call is claimed before the tool runs.
		switch err := w.claim(d); {
		case errors.Is(err, errClaimed):
			log.Info().Msg("call already taken by another delivery: not run")
			return Settled
		case err != nil:
			log.Warn().Err(err).Msg("could not claim a non-idempotent call before running it: not run")
			return Leave // redelivered after the ack wait, and claimed again
		}
	}
	w.publishProgress(call, attempt)

	cctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	unregister := w.register(call.RunID, call.CallKey, cancel)
	stopHeartbeat := func() {}
	if tc.idempotent { // a claimed call is settled already and needs none
		stopHeartbeat = d.Heartbeat(w.cfg.Heartbeat)
	}
	w.executed.Add(1)
	tc.meter.onStarted()
	res := w.h.Execute(cctx, harness.Call{
		Tool:           call.Tool,
		Arguments:      call.Arguments,
		Deadline:       call.Deadline,
		MaxOutputChars: call.MaxOutputChars,
		CallKey:        call.CallKey,
	})
	stopHeartbeat()
	unregister()
	tc.meter.onFinished(res.Outcome, res.Duration)
	if res.Outcome == protocol.OutcomeCancelled {
		w.cancelled.Add(1)
	}

	result := protocol.Result{
		V:          protocol.Version,
		RunID:      call.RunID,
		CallKey:    call.CallKey,
		Outcome:    res.Outcome,
		Output:     res.Output,
		Truncated:  res.Truncated,
		ErrorType:  res.ErrorType,
		DurationMS: res.Duration.Milliseconds(),
		Worker:     w.cfg.Name,
		Attempt:    attempt,
	}
	if err := w.publishResult(ctx, replyTo, &result, call.Deadline); err != nil {
		w.resultErrors.Add(1)
		tc.meter.onResultFailed()
		log.Error().Err(err).Str(logOutcome, string(res.Outcome)).Msg("could not publish a call's result")
		if tc.idempotent {
			return Nak(time.Second) // run again elsewhere, if the deadline allows
		}
		return Settled
	}
	ev := log.Info().Str(logOutcome, string(res.Outcome)).Dur(logDuration, res.Duration)
	if res.ErrorType != "" {
		ev = ev.Str(logErrorType, res.ErrorType)
	}
	ev.Msg("call finished")
	if tc.idempotent {
		return Ack
	}
	return Settled
}

// errClaimed refuses a non-idempotent call another delivery claimed.
var errClaimed = errors.New("natsbus: the call was claimed by another delivery")

// claim makes this delivery of a non-idempotent call the only one that
// runs it, by removing the call's message (seq) from the calls stream
// before the tool starts: the server removes a message once, so of two
// deliveries of one call (a redelivery after the first worker stalled past
// the ack wait) exactly one claim succeeds. An acknowledgement cannot
// decide it: the server confirms an ack of a message that another delivery
// has already acknowledged. It returns errClaimed when the server answers
// that the message is gone (claimed, or expired), and another error when
// it does not answer: then the message, if still there, is redelivered
// after the ack wait and claimed again.
func (w *Worker) claim(d *Delivery) error {
	if d.Seq == 0 {
		return codedError("no_stream_sequence")
	}
	ctx, cancel := context.WithTimeout(context.Background(), ackTimeout)
	defer cancel()
	if err := w.calls.DeleteMsg(ctx, d.Seq); err != nil {
		if errors.Is(err, jetstream.ErrMsgDeleteUnsuccessful) {
			d.Settle(Ack) // settles this delivery of a message that is gone
			return errClaimed
		}
		return err
	}
	// Removing the message also settled its delivery; the ack is for
	// whoever reads the consumer's state before the server updates it.
	d.Settle(Ack)
	return nil
}

// accept checks a delivered call: version, deadline header, strict body,
// tool and reply subject. It returns the call and the only subject its
// result may go to.
func (w *Worker) accept(tc *toolConsumer, m jetstream.Msg) (protocol.Call, string, error) {
	h := m.Headers()
	if v := h.Get(protocol.HeaderVersion); v != "" && v != strconv.Itoa(protocol.Version) {
		return protocol.Call{}, "", protocol.ErrVersion
	}
	if m.Subject() != tc.subject {
		return protocol.Call{}, "", codedError("subject_mismatch")
	}
	var hdrDeadline time.Time
	if d := h.Get(protocol.HeaderDeadline); d != "" {
		t, err := time.Parse(time.RFC3339Nano, d)
		if err != nil {
			return protocol.Call{}, "", codedError("bad_deadline_header")
		}
		hdrDeadline = t
	}
	call, err := protocol.DecodeCall(m.Data(), w.cfg.MaxMessageBytes)
	if err != nil {
		return protocol.Call{}, "", err
	}
	if call.Tool != tc.name {
		return protocol.Call{}, "", codedError("tool_mismatch")
	}
	replyTo, err := w.subjects.Result(call.RunID)
	if err != nil {
		return protocol.Call{}, "", err
	}
	switch got := h.Get(protocol.HeaderReplyTo); {
	case got == "":
		return protocol.Call{}, "", codedError("missing_reply_to")
	case got != replyTo:
		return protocol.Call{}, "", codedError("reply_to_mismatch")
	}
	if !hdrDeadline.IsZero() && hdrDeadline.Before(call.Deadline) {
		call.Deadline = hdrDeadline
	}
	if !w.cfg.Now().Before(call.Deadline) {
		return call, "", errExpired
	}
	return call, replyTo, nil
}

// publishProgress tells the coordinator the call started (core NATS, best
// effort).
func (w *Worker) publishProgress(call protocol.Call, attempt int) {
	subject, err := w.subjects.Progress(call.RunID)
	if err != nil {
		return
	}
	data, err := protocol.Encode(&protocol.Progress{
		V: protocol.Version, RunID: call.RunID, CallKey: call.CallKey, Worker: w.cfg.Name, Attempt: attempt,
	})
	if err != nil {
		return
	}
	w.nc.Publish(subject, data)
}

// publishResult stores r in the results stream on replyTo, deduplicated by
// the call key so a call run twice stores one result. It tries for
// publishTimeout, then, while the server does not answer, until the call's
// deadline plus resultGrace or until stopping ends (the worker cancels its
// calls to stop).
func (w *Worker) publishResult(stopping context.Context, replyTo string, r *protocol.Result, deadline time.Time) error {
	data, err := encodeResult(r, w.cfg.MaxMessageBytes)
	if err != nil {
		return err
	}
	msg := nats.NewMsg(replyTo)
	msg.Data = data
	msg.Header.Set(protocol.HeaderMsgID, protocol.ResultMsgID(r.CallKey))
	msg.Header.Set(protocol.HeaderVersion, strconv.Itoa(protocol.Version))
	opt := jetstream.WithExpectStream(w.subjects.ResultsStream())
	ctx, cancel := context.WithTimeout(context.Background(), publishTimeout)
	err = publishRetrying(ctx, w.js, msg, opt)
	cancel()
	if err == nil || !transient(err) || stopping.Err() != nil {
		return err
	}
	ctx, cancel = context.WithDeadline(stopping, deadline.Add(resultGrace))
	defer cancel()
	if ctx.Err() != nil {
		return err
	}
	return publishRetrying(ctx, w.js, msg, opt)
}

// encodeResult encodes r, cutting its output further until the message
// fits in limit bytes.
func encodeResult(r *protocol.Result, limit int) ([]byte, error) {
	for {
		data, err := protocol.Encode(r)
		if err != nil {
			return nil, err
		}
		if len(data) <= limit {
			return data, nil
		}
		if r.Output == "" {
			return nil, protocol.ErrTooLarge
		}
		r.Output, _ = protocol.Truncate(r.Output, utf8.RuneCountInString(r.Output)/2)
		r.Truncated = true
	}
}
