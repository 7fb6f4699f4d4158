package protocol

import (
	"time"
	"unicode/utf8"
)

// MaxProgressBytes bounds the message of one [Progress] report.
const MaxProgressBytes = 512

// maxProgressField bounds a report's call id and worker name.
const maxProgressField = 256

// Progress is one report of a running call's progress: what its tool said
// it is doing. Workers publish it on core NATS ([Subjects.Progress]),
// bounded in rate and size; a serving coordinator passes it on to the
// run's client ([Subjects.ClientRunProgress]), beside each call's
// [CallStarted]. It is shown to people and never reaches the model's
// transcript; losing one loses nothing else.
type Progress struct {
	V       int     `json:"v"`
	RunID   RunID   `json:"run_id"`
	CallKey CallKey `json:"call_key"`
	// CallID is set by the coordinator when it passes a report on; a
	// worker leaves it empty.
	CallID CallID `json:"call_id,omitempty"`
	// Tool is the tool of the call: a worker names its call's tool, and
	// a coordinator passes on only the reports whose tool is the one it
	// published the call to.
	Tool   ToolName `json:"tool,omitempty"`
	Worker string   `json:"worker,omitempty"`
	// Seq numbers the reports of one call from 1, the dropped ones
	// included, so a gap shows what was dropped on the way.
	Seq uint64 `json:"seq"`
	// Message is what the tool said: at most MaxProgressBytes of valid
	// UTF-8. It is untrusted text.
	Message string `json:"message"`
	// Dropped counts the reports of this call dropped so far by whoever
	// published this one (the rate bound).
	Dropped uint64 `json:"dropped,omitempty"`
}

// Validate checks the fields' rules.
func (p *Progress) Validate() error {
	if err := checkV(p.V); err != nil {
		return err
	}
	if err := checkRunKey(p.RunID, p.CallKey); err != nil {
		return err
	}
	switch {
	case len(p.CallID) > maxProgressField || !utf8.ValidString(string(p.CallID)):
		return invalid("call_id", "longer than 256 bytes or not valid UTF-8")
	case p.Tool != "" && !p.Tool.Valid():
		return invalid("tool", "must match "+TokenPattern)
	case len(p.Worker) > maxProgressField || !utf8.ValidString(p.Worker):
		return invalid("worker", "longer than 256 bytes or not valid UTF-8")
	case p.Seq == 0:
		return missing("seq")
	case p.Message == "":
		return missing("message")
	case len(p.Message) > MaxProgressBytes:
		return invalid("message", "longer than 512 bytes")
	case !utf8.ValidString(p.Message):
		return invalid("message", "not valid UTF-8")
	}
	return nil
}

// DecodeProgress decodes and validates a [Progress].
func DecodeProgress(data []byte, limit int) (Progress, error) {
	var m Progress
	err := decode(data, limit, &m)
	return m, err
}

// CallStarted tells a run's client that one of the run's calls started
// on a worker: a serving coordinator publishes it once per call, when it
// hears the worker's [Started] notice, on the run's progress subject
// ([Subjects.ClientRunProgress]), beside the calls' [Progress]. It is a
// message of its own, not a kind of Progress: its started_at is a field
// Progress does not have, and it has no seq or message, so a reader that
// decodes a progress subject's messages with [DecodeProgress] (whatever
// its release) refuses it rather than shows it as a line, and
// [DecodeCallStarted] refuses a progress report. Like progress, it is
// shown to people only; losing one loses nothing else.
type CallStarted struct {
	V       int     `json:"v"`
	RunID   RunID   `json:"run_id"`
	CallKey CallKey `json:"call_key"`
	// CallID is the call's id in the transcript (the model's text): at
	// most 256 bytes of valid UTF-8, untrusted.
	CallID CallID `json:"call_id,omitempty"`
	// Tool is the call's tool.
	Tool ToolName `json:"tool"`
	// Worker is the name the worker gave (untrusted): at most 256 bytes
	// of valid UTF-8.
	Worker string `json:"worker,omitempty"`
	// StartedAt is when the coordinator heard of the start.
	StartedAt time.Time `json:"started_at"`
}

// Validate checks the fields' rules.
func (p *CallStarted) Validate() error {
	if err := checkV(p.V); err != nil {
		return err
	}
	if err := checkRunKey(p.RunID, p.CallKey); err != nil {
		return err
	}
	switch {
	case len(p.CallID) > maxProgressField || !utf8.ValidString(string(p.CallID)):
		return invalid("call_id", "longer than 256 bytes or not valid UTF-8")
	case p.Tool == "":
		return missing("tool")
	case !p.Tool.Valid():
		return invalid("tool", "must match "+TokenPattern)
	case len(p.Worker) > maxProgressField || !utf8.ValidString(p.Worker):
		return invalid("worker", "longer than 256 bytes or not valid UTF-8")
	case p.StartedAt.IsZero():
		return missing("started_at")
	}
	return nil
}

// DecodeCallStarted decodes and validates a [CallStarted].
func DecodeCallStarted(data []byte, limit int) (CallStarted, error) {
	var m CallStarted
	err := decode(data, limit, &m)
	return m, err
}
