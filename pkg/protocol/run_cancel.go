package protocol

import "time"

// RunCancelRequest is an operator's request to cancel a run, stored on
// [Subjects.JournalCancel] in the cancels stream. Its presence is what
// counts: the coordinator running the run cancels it at once, and one that
// takes it later cancels it too. The fields are for the audit trail; no
// process decodes them.
type RunCancelRequest struct {
	V      int       `json:"v"`
	By     string    `json:"by,omitempty"`
	Reason string    `json:"reason,omitempty"`
	At     time.Time `json:"at,omitzero"`
}
