package approval

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// Outcomes recorded in a [Note].
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

// maxNoteBytes bounds a note on decode. Notes carry no arguments.
const maxNoteBytes = 4 << 10

// Note is the coordinator's record of how it settled one approval request.
// It is published on protocol.Subjects.ApprovalOutcome into the approvals
// stream, beside the request and the decisions, so the stream alone tells an
// auditor what was asked, what was answered and what the coordinator did.
type Note struct {
	V       int               `json:"v"`
	RunID   protocol.RunID    `json:"run_id"`
	CallKey protocol.CallKey  `json:"call_key"`
	Tool    protocol.ToolName `json:"tool"`
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
func (n *Note) Validate() error {
	switch {
	case n.V != protocol.Version:
		return fmt.Errorf("note: unsupported version %d", n.V)
	case !protocol.ValidToken(n.RunID):
		return errors.New("note: invalid run_id")
	case !protocol.ValidToken(n.CallKey):
		return errors.New("note: invalid call_key")
	case !protocol.ValidToken(n.Tool):
		return errors.New("note: invalid tool")
	case n.Digest == "":
		return errors.New("note: missing digest")
	case n.At.IsZero():
		return errors.New("note: missing at")
	}
	switch n.Outcome {
	case NoteApproved, NoteDenied, NoteExpired, NoteCancelled:
		return nil
	default:
		return errors.New("note: unknown outcome")
	}
}

// DecodeNote decodes and validates a [Note] strictly: one JSON object of at
// most 4 KiB, no unknown fields, no trailing data.
func DecodeNote(data []byte) (Note, error) {
	var n Note
	if len(data) > maxNoteBytes {
		return n, fmt.Errorf("note: %d bytes, limit %d", len(data), maxNoteBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&n); err != nil {
		return Note{}, errors.New("note: malformed JSON")
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Note{}, errors.New("note: trailing data after the JSON object")
	}
	if err := n.Validate(); err != nil {
		return Note{}, err
	}
	return n, nil
}

func encodeNote(n *Note) ([]byte, error) { return json.Marshal(n) }
