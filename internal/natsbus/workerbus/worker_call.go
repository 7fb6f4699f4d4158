package workerbus

import (
	"cmp"
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/approvalproof"
	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natsbus/stores"
	"github.com/toolfleet/toolfleet/internal/natsbus/workqueue"
	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// Term reasons, visible in the server's terminated-message advisories.
const (
	termMalformed  = "malformed"
	termExpired    = "expired"
	termUnapproved = "unapproved"
)

// codeRecordUnwritten is the event code of an approved call refused
// because its execution record could not be written.
const codeRecordUnwritten = "record_unwritten"

// errExpired refuses a call whose deadline has passed.
var errExpired = errors.New("natsbus: call deadline passed")

// process handles one delivered call from acceptance to its result, and
// says how its message is settled.
func (w *Worker) process(ctx context.Context, tc *toolConsumer, d *workqueue.Delivery) workqueue.Decision {
	m, attempt, seq := d.Msg, d.Attempt, d.Seq // seq: the call's message in the calls stream
	// Run at most once when either this worker's manifest or the call's
	// coordinator says so: the stricter holds.
	idempotent := tc.idempotent && m.Headers().Get(protocol.HeaderAtMostOnce) == ""
	rec := &callRecord{w: w, tc: tc, ct: startCallTrace(ctx, tc, m), subject: m.Subject(), attempt: attempt}
	ct := &rec.ct
	defer ct.end()
	rec.emit(CallEvent{Kind: CallDelivered})
	endValidation := ct.child("validation")
	call, replyTo, err := w.accept(tc, m)
	endValidation(traceErr(err))
	if err == nil || errors.Is(err, errExpired) {
		rec.accepted(call)
		ct.callID = call.CallID
	}
	switch {
	case errors.Is(err, errExpired) && !idempotent:
		return w.expireClaimed(ctx, rec, call, replyTo, d)
	case errors.Is(err, errExpired):
		rec.emit(CallEvent{Kind: CallTerminated, Reason: TerminatedExpired})
		return workqueue.Term(termExpired)
	case err != nil:
		rec.emit(CallEvent{Kind: CallTerminated, Reason: TerminatedMalformed, Code: natsbus.ErrorCode(err)})
		return workqueue.Term(termMalformed)
	}

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
			return w.refuseUnapproved(ctx, rec, call, replyTo, err)
		}
	}
	if dec, done := w.admit(ctx, rec, call, replyTo, d); done { // ratelimit.go
		return dec
	}

	if idempotent {
		// The server redelivers a call whose heartbeats it missed for the
		// ack wait (a stalled process or link), maybe to this worker. The
		// attempt running here heartbeats and acknowledges the same stream
		// message, which covers the new delivery too: it is not run twice
		// side by side.
		if !w.begin(call.RunID, call.CallKey, seq) {
			rec.emit(CallEvent{Kind: CallSkipped, Reason: SkippedRunningHere})
			return workqueue.Leave // the attempt running here settles the message
		}
		defer w.end(call.RunID, call.CallKey, seq)
	} else {
		// At most once: the call is claimed before the tool runs.
		switch err := w.claim(ctx, d, call); {
		case errors.Is(err, stores.ErrClaimed):
			rec.emit(CallEvent{Kind: CallSkipped, Reason: SkippedClaimed})
			return workqueue.Settled
		case err != nil:
			rec.emit(CallEvent{Kind: CallSkipped, Reason: SkippedClaimFailed, Err: err})
			return workqueue.Leave // redelivered after the ack wait, and claimed again
		}
		// A claim stored at or past the deadline may follow one that
		// expired (claim.go): the call is not started.
		if call.CallDeadline().Expired(w.cfg.Now()) {
			return w.answerExpired(ctx, rec, call, replyTo, attempt)
		}
	}
	if wantsStarted(d.Msg.Headers().Get(protocol.HeaderStartedNotice), idempotent) {
		w.publishStarted(call, attempt)
	}

	cctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	reg := w.register(call.RunID, call.CallKey, cancel)
	stopHeartbeat := func() {}
	if idempotent { // a claimed call is settled already and needs none
		stopHeartbeat = d.Heartbeat(w.cfg.Heartbeat)
	}
	rec.emit(CallEvent{Kind: CallStarted})
	endExecution := ct.child("execution")
	pctx, progress := w.withProgress(cctx, call)
	hc := harness.Call{
		Tool:           call.Tool,
		Arguments:      call.Arguments,
		Deadline:       call.Deadline,
		MaxOutputChars: call.MaxOutputChars,
		CallKey:        call.CallKey,
	}
	// The harness writes no line of its own: the finish event's line
	// carries its fields with the run's ids.
	res := w.h.ExecuteUnlogged(pctx, hc)
	progress.end()
	stopHeartbeat()
	w.unregister(reg)
	if res.Outcome == protocol.OutcomeOK {
		endExecution("")
	} else {
		endExecution(string(res.Outcome))
	}
	rec.finished(CallEvent{Kind: CallFinished, Outcome: res.Outcome, Duration: res.Duration, ErrorType: res.ErrorType}, &hc, &res)

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
	d.FreeSlot() // the tool is done: storing its result waits on the server, not on a slot
	err = w.publishResult(ctx, replyTo, tc.name, &result, call.CallDeadline(), batchLimit)
	if err == nil {
		endPublish("")
	} else {
		endPublish("publish_failed")
	}
	if err != nil {
		rec.emit(CallEvent{Kind: ResultFailed, Outcome: res.Outcome, Err: err})
		if idempotent {
			// Run again elsewhere, if the deadline allows: the same stored
			// call, whose execution record (if approved) it holds.
			return workqueue.Nak(time.Second)
		}
		return workqueue.Settled
	}
	if idempotent {
		return workqueue.Ack
	}
	return workqueue.Settled
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
// timeout — not run — so its coordinator, whose withdrawal finds it
// claimed, learns that it did not start.
func (w *Worker) expireClaimed(ctx context.Context, rec *callRecord, call protocol.Call, replyTo string, d *workqueue.Delivery) workqueue.Decision {
	if !stores.StartTrusted(call.CallDeadline(), w.cfg.Now()) {
		// Its coordinator answered it long ago, and a claim now would
		// prove nothing (another delivery's may have expired): neither
		// claimed nor answered.
		rec.emit(CallEvent{Kind: CallTerminated, Reason: TerminatedExpired})
		return workqueue.Term(termExpired)
	}
	switch err := w.claim(ctx, d, call); {
	case errors.Is(err, stores.ErrClaimed):
		rec.emit(CallEvent{Kind: CallSkipped, Reason: SkippedClaimed, Code: termExpired})
		return workqueue.Settled
	case err != nil:
		rec.emit(CallEvent{Kind: CallSkipped, Reason: SkippedClaimFailed, Code: termExpired, Err: err})
		return workqueue.Leave
	}
	return w.answerExpired(ctx, rec, call, replyTo, d.Attempt)
}

// answerExpired answers timeout (not run) for a non-idempotent call this
// delivery claimed at or past its deadline, and settles it — unanswered
// when its claim no longer proves that no other delivery held the call.
func (w *Worker) answerExpired(ctx context.Context, rec *callRecord, call protocol.Call, replyTo string, attempt int) workqueue.Decision {
	if !stores.StartTrusted(call.CallDeadline(), w.cfg.Now()) {
		rec.emit(CallEvent{Kind: CallTerminated, Reason: TerminatedExpired})
		return workqueue.Settled
	}
	rec.emit(CallEvent{Kind: CallTerminated, Reason: TerminatedExpired, Outcome: protocol.OutcomeTimeout})
	result := protocol.Result{
		V: protocol.Version, RunID: call.RunID, CallKey: call.CallKey, Outcome: protocol.OutcomeTimeout,
		ErrorType: termExpired, Worker: w.cfg.Name, Attempt: attempt,
	}
	if err := w.publishResult(ctx, replyTo, rec.tc.name, &result, call.CallDeadline(), 0); err != nil {
		rec.emit(CallEvent{Kind: ResultFailed, Outcome: result.Outcome, Err: err})
	}
	return workqueue.Settled
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
	return approvalproof.Verify(ctx, st, w.subjects, call, min(w.cfg.ApprovalMaxAge, natsbus.MaxApprovalMaxAge))
}

// refuseUnapproved answers a call that needs approval and has no valid
// proof: denied, never run, and the message terminated so that it is not
// delivered again.
func (w *Worker) refuseUnapproved(ctx context.Context, rec *callRecord, call protocol.Call, replyTo string, why error) workqueue.Decision {
	ev := CallEvent{Kind: CallTerminated, Reason: TerminatedUnapproved, Outcome: protocol.OutcomeDenied, Code: "stream_error"}
	errorType := ""
	var perr *approvalproof.Error
	var unwritten *unwrittenRecord
	switch {
	case errors.As(why, &unwritten):
		// The approval is valid; its execution record is not written.
		ev.Code, ev.Err, errorType = codeRecordUnwritten, unwritten.err, loop.ErrorTypeRecordUnwritten
	case errors.As(why, &perr):
		ev.Code = perr.Code
	default:
		// The approvals stream could not be read (a missing permission
		// for its STREAM.INFO and STREAM.MSG.GET, the server away): the
		// error names the API, never a payload.
		ev.Err = why
	}
	rec.emit(ev)
	result := protocol.Result{
		V: protocol.Version, RunID: call.RunID, CallKey: call.CallKey, Outcome: protocol.OutcomeDenied,
		ErrorType: cmp.Or(errorType, "approval:"+ev.Code), Worker: w.cfg.Name, Attempt: rec.attempt,
	}
	if err := w.publishResult(ctx, replyTo, rec.tc.name, &result, call.CallDeadline(), 0); err != nil {
		rec.emit(CallEvent{Kind: ResultFailed, Outcome: result.Outcome, Err: err})
	}
	return workqueue.Term(termUnapproved)
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
		return protocol.Call{}, "", natsbus.CodedError("subject_mismatch")
	}
	call, err := protocol.DecodeCall(m.Data(), w.cfg.MaxMessageBytes)
	if err != nil {
		return protocol.Call{}, "", err
	}
	// The earlier of the header's deadline and the body's holds.
	deadline, err := call.CallDeadline().Tighten(h.Get(protocol.HeaderDeadline))
	if err != nil {
		return protocol.Call{}, "", natsbus.CodedError("bad_deadline_header")
	}
	call.Deadline = deadline.At
	if call.Tool != tc.name {
		return protocol.Call{}, "", natsbus.CodedError("tool_mismatch")
	}
	replyTo, err := w.subjects.Result(call.RunID, tc.name)
	if err != nil {
		return protocol.Call{}, "", err
	}
	switch got := h.Get(protocol.HeaderReplyTo); {
	case got == "":
		return protocol.Call{}, "", natsbus.CodedError("missing_reply_to")
	case got != replyTo:
		return protocol.Call{}, "", natsbus.CodedError("reply_to_mismatch")
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
	// First asynchronously, its PubAck awaited for one attempt's time; the
	// call is settled once this returns, on the PubAck.
	var again bool
	if batchLimit > 0 {
		again, err = w.coalesced(replyTo, r.RunID, tool, r.CallKey, data, batchLimit)
	} else {
		again, err = w.firstAttempt(w.resultMessage(replyTo, protocol.ResultMsgID(tool, r.CallKey), data))
	}
	if !again {
		return err
	}
	msg := w.resultMessage(replyTo, protocol.ResultMsgID(tool, r.CallKey), data)
	// No answer, or one that may pass: published again with the same
	// Nats-Msg-Id, stored at most once.
	ctx, cancel := context.WithTimeout(context.Background(), publishTimeout)
	_, err = natsbus.PublishRetrying(ctx, w.js, msg, w.toResults)
	cancel()
	if err == nil || !natsbus.Transient(err) || stopping.Err() != nil {
		return err
	}
	ctx, cancel = context.WithDeadline(stopping, deadline.ResultBy())
	defer cancel()
	if ctx.Err() != nil {
		return err
	}
	_, err = natsbus.PublishRetrying(ctx, w.js, msg, w.toResults)
	return err
}
