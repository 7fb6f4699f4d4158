package natsbus

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/internal/approvalproof"

	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// Term reasons, visible in the server's terminated-message advisories.
const (
	termMalformed  = "malformed"
	termExpired    = "expired"
	termUnapproved = "unapproved"
)

// errExpired refuses a call whose deadline has passed.
var errExpired = errors.New("natsbus: call deadline passed")

// process handles one delivered call from acceptance to its result, and
// says how its message is settled.
func (w *Worker) process(ctx context.Context, tc *toolConsumer, d *Delivery) Decision {
	m, attempt, seq := d.Msg, d.Attempt, d.Seq // seq: the call's message in the calls stream
	// Run at most once when either this worker's manifest or the call's
	// coordinator says so: the stricter holds.
	idempotent := tc.idempotent && m.Headers().Get(protocol.HeaderAtMostOnce) == ""
	tc.meter.onDelivered(attempt)
	ct := startCallTrace(ctx, tc.name, m)
	outcome := "not_run"
	defer func() { ct.end(outcome) }()
	endValidation := ct.child("validation")
	call, replyTo, err := w.accept(tc, m)
	endValidation(traceErr(err))
	switch {
	case errors.Is(err, errExpired) && !idempotent:
		return w.expireClaimed(ctx, tc, call, replyTo, d)
	case errors.Is(err, errExpired):
		w.expired.Add(1)
		tc.meter.onTerminated(TerminatedExpired)
		w.log.Info().Str(logTool, string(tc.name)).Str(logRun, string(call.RunID)).Str(logCallKey, string(call.CallKey)).
			Int(logAttempt, attempt).Msg("call expired before it started: not run")
		return Term(termExpired)
	case err != nil:
		w.malformed.Add(1)
		tc.meter.onTerminated(TerminatedMalformed)
		w.limited.Warn().Str(logSubject, m.Subject()).Str(logCode, errorCode(err)).Msg("terminated a malformed call")
		return Term(termMalformed)
	}
	log := w.log.With().Str(logTool, string(tc.name)).Str(logRun, string(call.RunID)).Str(logCallKey, string(call.CallKey)).
		Int(logAttempt, attempt).Logger()

	// Checked twice: the coordinator asked an operator, and the worker
	// reads the operator's decision back itself, for every call its own
	// manifest or the call marks. Whoever published the call, a missing
	// or forged approval never runs.
	if tc.spec.RequiresApproval || call.RequiresApproval {
		// One approval, one execution fleet-wide: the first stored copy
		// of the call to write its execution record runs it; every other
		// copy, whoever published it and whichever worker takes it, is
		// refused.
		err := w.verifyApproval(ctx, call)
		if err == nil {
			err = w.recordExecution(ctx, call, seq)
		}
		if err != nil {
			return w.refuseUnapproved(ctx, tc, call, replyTo, attempt, err, log)
		}
	}
	if dec, done := w.admit(ctx, tc, call, replyTo, d, log); done { // ratelimit.go
		return dec
	}

	if idempotent {
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
			log.Info().Msg("call already claimed by another delivery, or withdrawn: not run")
			return Settled
		case err != nil:
			log.Warn().Err(err).Msg("could not claim a non-idempotent call before running it: not run")
			return Leave // redelivered after the ack wait, and claimed again
		}
	}
	ct.call(call, attempt)
	if wantsStarted(d.Msg.Headers().Get(protocol.HeaderStartedNotice), idempotent) {
		w.publishStarted(call, attempt)
	}

	cctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	unregister := w.register(call.RunID, call.CallKey, cancel)
	stopHeartbeat := func() {}
	if idempotent { // a claimed call is settled already and needs none
		stopHeartbeat = d.Heartbeat(w.cfg.Heartbeat)
	}
	w.executed.Add(1)
	tc.meter.onStarted()
	endExecution := ct.child("execution")
	pctx, endProgress := w.withProgress(cctx, call)
	res := w.h.Execute(pctx, harness.Call{
		Tool:           call.Tool,
		Arguments:      call.Arguments,
		Deadline:       call.Deadline,
		MaxOutputChars: call.MaxOutputChars,
		CallKey:        call.CallKey,
	})
	endProgress()
	stopHeartbeat()
	unregister()
	outcome = string(res.Outcome)
	if res.Outcome == protocol.OutcomeOK {
		endExecution("")
	} else {
		endExecution(string(res.Outcome))
	}
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
	endPublish := ct.child("result publish")
	// A call whose coordinator reads batches may share a message with
	// other results of its run and tool.
	batchLimit, _ := protocol.ResultBatchLimit(m.Headers().Get(protocol.HeaderResultBatch))
	err = w.publishResult(ctx, replyTo, tc.name, &result, call.CallDeadline(), batchLimit)
	if err == nil {
		endPublish("")
	} else {
		endPublish("publish_failed")
	}
	if err != nil {
		w.resultErrors.Add(1)
		tc.meter.onResultFailed()
		log.Error().Err(err).Str(logOutcome, string(res.Outcome)).Msg("could not publish a call's result")
		if idempotent {
			// Run again elsewhere, if the deadline allows: the same stored
			// call, whose execution record (if approved) it holds.
			return Nak(time.Second)
		}
		return Settled
	}
	ev := log.Info().Str(logOutcome, string(res.Outcome)).Dur(logDuration, res.Duration)
	if res.ErrorType != "" {
		ev = ev.Str(logErrorType, res.ErrorType)
	}
	ev.Msg("call finished")
	if idempotent {
		return Ack
	}
	return Settled
}

// wantsStarted reports whether the coordinator of a call whose
// protocol.HeaderStartedNotice is header wants a started notice. Only a
// non-idempotent call's start decides something: past its deadline, a
// started one is outcome_unknown, not timeout. A coordinator that learns
// it by withdrawing the call at its deadline asks for none; one that
// needs only those asks for no idempotent call's; one that shows every
// call's progress, or predates the header, for every call's.
func wantsStarted(header string, idempotent bool) bool {
	switch header {
	case protocol.StartedNoticeNone:
		return false
	case protocol.StartedNoticeNonIdempotent:
		return !idempotent
	}
	return true
}

// expireClaimed settles a non-idempotent call delivered past its deadline.
// It is claimed like one about to run, so that it never runs, and answered
// timeout — not run — so its coordinator, which may be about to withdraw
// it, learns that it did not start rather than finding it gone.
func (w *Worker) expireClaimed(ctx context.Context, tc *toolConsumer, call protocol.Call, replyTo string, d *Delivery) Decision {
	log := w.log.Info().Str(logTool, string(tc.name)).Str(logRun, string(call.RunID)).Str(logCallKey, string(call.CallKey)).
		Int(logAttempt, d.Attempt)
	switch err := w.claim(d); {
	case errors.Is(err, errClaimed):
		log.Msg("call expired, and already claimed or withdrawn: not run")
		return Settled
	case err != nil:
		log.Err(err).Msg("could not claim an expired non-idempotent call: not run")
		return Leave
	}
	w.expired.Add(1)
	tc.meter.onTerminated(TerminatedExpired)
	log.Msg("call expired before it started: not run")
	result := protocol.Result{
		V: protocol.Version, RunID: call.RunID, CallKey: call.CallKey, Outcome: protocol.OutcomeTimeout,
		ErrorType: termExpired, Worker: w.cfg.Name, Attempt: d.Attempt,
	}
	if err := w.publishResult(ctx, replyTo, tc.name, &result, call.CallDeadline(), 0); err != nil {
		w.resultErrors.Add(1)
		tc.meter.onResultFailed()
		w.log.Error().Err(err).Str(logTool, string(tc.name)).Str(logCallKey, string(call.CallKey)).
			Msg("could not publish a call's result")
	}
	return Settled
}

// verifyApproval checks the call's proof of approval against the
// approvals stream.
func (w *Worker) verifyApproval(ctx context.Context, call protocol.Call) error {
	if call.Approval == nil {
		return approvalproof.ErrMissing
	}
	ctx, cancel := context.WithTimeout(ctx, ackTimeout)
	defer cancel()
	w.approvalsMu.Lock()
	st := w.approvals
	w.approvalsMu.Unlock()
	if st == nil {
		var err error
		if st, err = w.js.Stream(ctx, w.subjects.ApprovalsStream()); err != nil {
			return err
		}
		w.approvalsMu.Lock()
		w.approvals = st
		w.approvalsMu.Unlock()
	}
	return approvalproof.Verify(ctx, st, w.subjects, call, min(w.cfg.ApprovalMaxAge, MaxApprovalMaxAge))
}

// refuseUnapproved answers a call that needs approval and has no valid
// proof: denied, never run, and the message terminated so that it is not
// delivered again.
func (w *Worker) refuseUnapproved(ctx context.Context, tc *toolConsumer, call protocol.Call, replyTo string, attempt int, why error, log zerolog.Logger) Decision {
	w.unapproved.Add(1)
	tc.meter.onTerminated(TerminatedUnapproved)
	code := "stream_error"
	var perr *approvalproof.Error
	ev := log.Warn()
	if errors.As(why, &perr) {
		code = perr.Code
	} else {
		// The approvals stream could not be read (a missing permission
		// for its STREAM.INFO and STREAM.MSG.GET, the server away): the
		// error names the API, never a payload.
		ev = ev.Err(why)
	}
	ev.Str(logCode, code).Msg("refused a call that needs approval: no valid approval in the approvals stream; not run")
	result := protocol.Result{
		V: protocol.Version, RunID: call.RunID, CallKey: call.CallKey, Outcome: protocol.OutcomeDenied,
		ErrorType: "approval:" + code, Worker: w.cfg.Name, Attempt: attempt,
	}
	if err := w.publishResult(ctx, replyTo, tc.name, &result, call.CallDeadline(), 0); err != nil {
		w.resultErrors.Add(1)
		tc.meter.onResultFailed()
		log.Error().Err(err).Str(logOutcome, string(result.Outcome)).Msg("could not publish a call's result")
	}
	return Term(termUnapproved)
}

// errClaimed refuses a non-idempotent call another delivery claimed.
var errClaimed = errors.New("natsbus: the call was claimed by another delivery")

// claim makes this delivery of a non-idempotent call the only one that
// runs it, by removing the call's message (seq) from the calls stream
// before the tool starts: the server removes a message once, so of two
// deliveries of one call (a redelivery after the first worker stalled past
// the ack wait) exactly one claim succeeds. An acknowledgement cannot
// decide it: the server confirms an ack of a message that another delivery
// has already acknowledged. It returns errClaimed when the server refuses
// the removal — the message is gone (claimed, withdrawn or expired), or,
// rarely, its store failed — and another error when it does not answer.
// Nothing is sent after it: the server settles a pending delivery of a
// message it removes as it would an ack, so a claimed delivery, and any
// other of the same message, is settled already; a message still there
// (no answer, or a failed store) is redelivered after the ack wait and
// claimed again.
func (w *Worker) claim(d *Delivery) error {
	if d.Seq == 0 {
		return codedError("no_stream_sequence")
	}
	ctx, cancel := context.WithTimeout(context.Background(), ackTimeout)
	defer cancel()
	if err := w.calls.DeleteMsg(ctx, d.Seq); err != nil {
		if errors.Is(err, jetstream.ErrMsgDeleteUnsuccessful) {
			return errClaimed
		}
		return err
	}
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
	if tool, _, _, ok := w.subjects.ParseCall(m.Subject()); !ok || tool != tc.name {
		return protocol.Call{}, "", codedError("subject_mismatch")
	}
	call, err := protocol.DecodeCall(m.Data(), w.cfg.MaxMessageBytes)
	if err != nil {
		return protocol.Call{}, "", err
	}
	// The earlier of the header's deadline and the body's holds.
	deadline, err := call.CallDeadline().Tighten(h.Get(protocol.HeaderDeadline))
	if err != nil {
		return protocol.Call{}, "", codedError("bad_deadline_header")
	}
	call.Deadline = deadline.At
	if call.Tool != tc.name {
		return protocol.Call{}, "", codedError("tool_mismatch")
	}
	replyTo, err := w.subjects.Result(call.RunID, tc.name)
	if err != nil {
		return protocol.Call{}, "", err
	}
	switch got := h.Get(protocol.HeaderReplyTo); {
	case got == "":
		return protocol.Call{}, "", codedError("missing_reply_to")
	case got != replyTo:
		return protocol.Call{}, "", codedError("reply_to_mismatch")
	}
	if deadline.Expired(w.cfg.Now()) {
		return call, replyTo, errExpired
	}
	return call, replyTo, nil
}

// publishStarted tells the coordinator the call started (core NATS, best
// effort).
func (w *Worker) publishStarted(call protocol.Call, attempt int) {
	subject, err := w.subjects.Started(call.RunID)
	if err != nil {
		return
	}
	data, err := protocol.Encode(&protocol.Started{
		V: protocol.Version, RunID: call.RunID, CallKey: call.CallKey, Worker: w.cfg.Name, Attempt: attempt,
	})
	if err != nil {
		return
	}
	w.nc.Publish(subject, data)
}

// publishResult stores r in the results stream on replyTo, deduplicated by
// the call key so a call run twice stores one result. It publishes
// asynchronously — when its coordinator reads batches of up to
// batchLimit bytes (0: it does not), with other results of the subject
// ([Worker.coalesced]) — and waits for the PubAck for one
// attempt's time, then tries alone for publishTimeout, then, while the
// server does not answer, until the end of the coordinator's wait for it
// (deadline.ResultBy: the call's deadline plus the grace it carries) or
// until stopping ends (the worker cancels its calls to stop).
func (w *Worker) publishResult(stopping context.Context, replyTo string, tool protocol.ToolName, r *protocol.Result, deadline protocol.CallDeadline, batchLimit int) error {
	data, err := protocol.EncodeResultWithin(r, w.cfg.MaxMessageBytes)
	if err != nil {
		return err
	}
	id := protocol.ResultMsgID(tool, r.CallKey)
	// First asynchronously, its PubAck awaited for one attempt's time; the
	// call is settled once this returns, on the PubAck.
	var again bool
	if batchLimit > 0 {
		again, err = w.coalesced(replyTo, r.RunID, tool, r.CallKey, id, data, batchLimit)
	} else {
		again, err = w.firstAttempt(w.resultMessage(replyTo, id, data))
	}
	if !again {
		return err
	}
	msg := w.resultMessage(replyTo, id, data)
	// No answer, or one that may pass: published again with the same
	// Nats-Msg-Id, stored at most once.
	opt := jetstream.WithExpectStream(w.subjects.ResultsStream())
	ctx, cancel := context.WithTimeout(context.Background(), publishTimeout)
	_, err = publishRetrying(ctx, w.js, msg, opt)
	cancel()
	if err == nil || !transient(err) || stopping.Err() != nil {
		return err
	}
	ctx, cancel = context.WithDeadline(stopping, deadline.ResultBy())
	defer cancel()
	if ctx.Err() != nil {
		return err
	}
	_, err = publishRetrying(ctx, w.js, msg, opt)
	return err
}
