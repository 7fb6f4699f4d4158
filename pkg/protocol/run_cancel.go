package protocol

import (
	"time"
	"unicode/utf8"
)

// Bounds of a [RunCancelRequest]'s text fields.
const (
	maxCancelBy     = 256
	maxCancelReason = 1024
)

// RunCancelRequest is an operator's request to cancel a run, stored on
// [Subjects.JournalCancel] in the cancels stream: the coordinator running
// the run cancels it at once, and one that takes it later cancels it too.
// Only a request that decodes ([DecodeRunCancelRequest]), names the run of
// its subject and names its author counts: any other message stored there
// (a server's reply, a request for another run) cancels nothing.
type RunCancelRequest struct {
	V int `json:"v"`
	// RunID is the run to cancel: the run of the subject it is stored on.
	RunID RunID `json:"run_id"`
	// By names who asked: required, at most 256 bytes of UTF-8.
	By string `json:"by"`
	// Reason says why: at most 1024 bytes of UTF-8.
	Reason string    `json:"reason,omitempty"`
	At     time.Time `json:"at,omitzero"`
}

// Validate checks the fields' rules.
func (r *RunCancelRequest) Validate() error {
	if err := checkV(r.V); err != nil {
		return err
	}
	switch {
	case r.RunID == "":
		return missing("run_id")
	case !r.RunID.Valid():
		return invalid("run_id", "must match "+TokenPattern)
	case r.By == "":
		return missing("by")
	case len(r.By) > maxCancelBy || !utf8.ValidString(r.By):
		return invalid("by", "longer than 256 bytes or not valid UTF-8")
	case len(r.Reason) > maxCancelReason || !utf8.ValidString(r.Reason):
		return invalid("reason", "longer than 1024 bytes or not valid UTF-8")
	}
	return nil
}

// DecodeRunCancelRequest decodes and validates a [RunCancelRequest] stored
// for run: its run_id must be run.
func DecodeRunCancelRequest(data []byte, run RunID, limit int) (RunCancelRequest, error) {
	var m RunCancelRequest
	if err := decode(data, limit, &m); err != nil {
		return m, err
	}
	if m.RunID != run {
		return m, invalid("run_id", "not the run of the subject")
	}
	return m, nil
}
