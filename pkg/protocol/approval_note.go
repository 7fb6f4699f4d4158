package protocol

import (
	"encoding/json"
	"time"
)

// Outcomes recorded in an [ApprovalNote].
const (
	// NoteApproved: a valid approval arrived in time; the call may run.
	NoteApproved = "approved"
	// NoteDenied: a valid denial arrived in time; the call does not run.
	NoteDenied = "denied"
	// NoteExpired: no valid decision arrived before the deadline; the call
	// does not run. Never attributed to a human.
	NoteExpired = "expired"
	// NoteCancelled: the run stopped waiting (cancelled or shut down) before a
	// decision arrived; the call does not run.
	NoteCancelled = "cancelled"
)

// MaxApprovalNoteBytes bounds an [ApprovalNote] on decode. Notes carry no
// arguments.
const MaxApprovalNoteBytes = 4 << 10

// ApprovalNote is the coordinator's record of how it settled one approval
// request. It is published on [Subjects.ApprovalOutcome] into the approvals
// stream, beside the request and the decisions, so the stream alone tells
// an auditor what was asked, what was answered and what the coordinator
// did.
type ApprovalNote struct {
	V       int      `json:"v"`
	RunID   RunID    `json:"run_id"`
	CallKey CallKey  `json:"call_key"`
	Tool    ToolName `json:"tool"`
	// Digest is the request's digest.
	Digest string `json:"digest"`
	// Outcome is one of NoteApproved, NoteDenied, NoteExpired, NoteCancelled.
	Outcome string `json:"outcome"`
	// Approver and Reason are copied from the decision that counted.
	Approver string `json:"approver,omitempty"`
	Reason   string `json:"reason,omitempty"`
	// At is when the coordinator settled the request.
	At time.Time `json:"at"`
}

// Validate checks the fields' rules.
func (n *ApprovalNote) Validate() error {
	if err := checkV(n.V); err != nil {
		return err
	}
	if err := checkRunKey(n.RunID, n.CallKey); err != nil {
		return err
	}
	switch {
	case !n.Tool.Valid():
		return invalid("tool", "must match "+TokenPattern)
	case n.Digest == "":
		return missing("digest")
	case n.At.IsZero():
		return missing("at")
	}
	switch n.Outcome {
	case NoteApproved, NoteDenied, NoteExpired, NoteCancelled:
		return nil
	case "":
		return missing("outcome")
	default:
		return invalid("outcome", "unknown outcome")
	}
}

// DecodeApprovalNote decodes and validates an [ApprovalNote] strictly: one
// JSON object of at most [MaxApprovalNoteBytes], no unknown fields, no
// trailing data.
func DecodeApprovalNote(data []byte) (ApprovalNote, error) {
	var n ApprovalNote
	if err := decode(data, MaxApprovalNoteBytes, &n); err != nil {
		return ApprovalNote{}, err
	}
	return n, nil
}

// EncodeApprovalNote encodes n as it is published.
func EncodeApprovalNote(n *ApprovalNote) ([]byte, error) { return json.Marshal(n) }
