package serve

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/model/transcript"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// MaxRunMessages bounds the transcript a run request may carry.
const MaxRunMessages = 1000

// decodeRunRequest decodes a run request strictly, and its transcript when
// it carries one. Errors are *protocol.Error values that never quote the
// request.
func decodeRunRequest(data []byte, limit int) (protocol.RunRequest, []loop.Message, error) {
	req, err := protocol.DecodeRunRequest(data, limit)
	if err != nil || !req.HasMessages() {
		return req, nil, err
	}
	msgs, err := decodeMessages(req.Messages)
	return req, msgs, err
}

func decodeMessages(raw json.RawMessage) ([]loop.Message, error) {
	bad := func(msg string) error {
		return &protocol.Error{Code: protocol.CodeInvalidField, Field: "messages", Msg: msg}
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var msgs []loop.Message
	if err := dec.Decode(&msgs); err != nil {
		// An Anthropic Messages transcript or Responses input items.
		if msgs, _, err = transcript.Decode(raw); err != nil {
			return nil, bad("must be an array of {role, content, tool_calls, tool_call_id} messages, an Anthropic Messages transcript or Responses input items")
		}
	}
	switch {
	case len(msgs) == 0:
		return nil, bad("must not be empty")
	case len(msgs) > MaxRunMessages:
		return nil, bad(fmt.Sprintf("holds more than %d messages", MaxRunMessages))
	}
	return msgs, nil
}

// fillResult copies the loop's result into rec, in the form "coordinator
// run --output json" prints.
func fillResult(rec *protocol.RunResult, res *loop.Result) error {
	rec.Answer = res.Answer
	rec.TerminationReason = string(res.TerminationReason)
	rec.DryRun = res.DryRun
	rec.ParkReason = res.ParkReason
	var err error
	if len(res.SideEffects) > 0 {
		if rec.SideEffects, err = json.Marshal(res.SideEffects); err != nil {
			return err
		}
	}
	if rec.Metadata, err = json.Marshal(res.Metadata); err != nil {
		return err
	}
	calls := res.Calls
	if calls == nil {
		calls = []loop.CallRecord{}
	}
	if rec.Calls, err = json.Marshal(calls); err != nil {
		return err
	}
	msgs := res.Messages
	if msgs == nil {
		msgs = []loop.Message{}
	}
	rec.Messages, err = json.Marshal(msgs)
	return err
}

// encodeBounded encodes rec in at most limit bytes: it leaves out the
// transcript, then the call records, and as a last resort replaces the
// result with a too_large error.
func encodeBounded(rec *protocol.RunResult, limit int) ([]byte, error) {
	data, err := encodeJSON(rec)
	if err != nil || len(data) <= limit {
		return data, err
	}
	if rec.Messages != nil {
		rec.Messages, rec.TranscriptOmitted = nil, true
		if data, err = encodeJSON(rec); err != nil || len(data) <= limit {
			return data, err
		}
	}
	rec.Calls = nil
	if data, err = encodeJSON(rec); err != nil || len(data) <= limit {
		return data, err
	}
	small := protocol.RunResult{
		V: rec.V, RunID: rec.RunID, TerminationReason: rec.TerminationReason, Metadata: rec.Metadata,
		DryRun: rec.DryRun, SideEffects: rec.SideEffects, ParkReason: rec.ParkReason, TranscriptOmitted: true, Coordinator: rec.Coordinator, Attempt: rec.Attempt, Limits: rec.Limits,
		Clamped: rec.Clamped, SubmittedAt: rec.SubmittedAt, StartedAt: rec.StartedAt, FinishedAt: rec.FinishedAt,
		Error: &protocol.RunError{Code: protocol.CodeTooLarge, Message: fmt.Sprintf("the result is over the %d-byte result limit: the answer was left out", limit)},
	}
	*rec = small
	return encodeJSON(rec)
}

// encodeJSON is protocol.Encode without HTML escaping, so that "<", ">" and
// "&" in answers, transcripts and error messages stay readable in "nats req"
// and "nats kv get". The output is the same JSON value.
func encodeJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
