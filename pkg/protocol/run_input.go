package protocol

import (
	"strings"
	"unicode/utf8"
)

// The modes of a [RunInput].
const (
	// RunInputEnqueue: the message is seen at the run's next model step.
	RunInputEnqueue = "enqueue"
	// RunInputInterrupt: the round in flight is interrupted first — its
	// calls not yet published, and its non-idempotent calls no worker has
	// claimed, are withdrawn and answered [OutcomeInterrupted] — then the
	// model sees the message.
	RunInputInterrupt = "interrupt"
)

// MaxRunInputContent bounds a [RunInput]'s content, in bytes.
const MaxRunInputContent = 32 << 10

// RunInput is a client's new user message to its run in flight, a request
// on [Subjects.RunInput] answered by the coordinator running the run with
// a [RunInputReply]. A message that does not decode ([DecodeRunInput]) or
// names another run is refused.
type RunInput struct {
	V int `json:"v"`
	// RunID is the run: the run of the subject.
	RunID RunID `json:"run_id"`
	// Mode is RunInputEnqueue or RunInputInterrupt.
	Mode string `json:"mode"`
	// Content is the user message: not blank, valid UTF-8, at most
	// MaxRunInputContent bytes.
	Content string `json:"content"`
}

// Validate checks the fields' rules.
func (r *RunInput) Validate() error {
	if err := checkV(r.V); err != nil {
		return err
	}
	switch {
	case r.RunID == "":
		return missing("run_id")
	case !r.RunID.Valid():
		return invalid("run_id", "must match "+TokenPattern)
	case r.Mode != RunInputEnqueue && r.Mode != RunInputInterrupt:
		return invalid("mode", "must be enqueue or interrupt")
	case strings.TrimSpace(r.Content) == "":
		return missing("content")
	case len(r.Content) > MaxRunInputContent || !utf8.ValidString(r.Content):
		return invalid("content", "longer than 32768 bytes or not valid UTF-8")
	}
	return nil
}

// DecodeRunInput decodes and validates a [RunInput] sent for run: its
// run_id must be run.
func DecodeRunInput(data []byte, run RunID) (RunInput, error) {
	var m RunInput
	if err := decode(data, MaxRunInputContent+4<<10, &m); err != nil {
		return m, err
	}
	if m.RunID != run {
		return m, invalid("run_id", "not the run of the subject")
	}
	return m, nil
}

// RunInputReply answers a [RunInput]: taken by the run (it is journaled
// and takes effect as its mode says), or refused with Error.
type RunInputReply struct {
	V        int       `json:"v"`
	RunID    RunID     `json:"run_id"`
	Accepted bool      `json:"accepted"`
	Error    *RunError `json:"error,omitempty"`
}

// RunInput is the core-NATS subject a client sends a [RunInput] to
// its run on: <prefix>.run.input.<client>.<run>, or
// <prefix>.run.input.<run> without a client. A deployment lets each
// client send under its own <client> token only; the coordinator running
// the run answers, and only for the run's own client.
func (s Subjects) RunInput(client string, run RunID) (string, error) {
	if client == "" {
		return s.join("run.input", string(run))
	}
	return s.join("run.input", client, string(run))
}

// RunInputs is the wildcard covering every run input subject.
func (s Subjects) RunInputs() string { return s.p() + ".run.input.>" }

// ParseRunInput splits a run input subject ([Subjects.RunInput]) into its
// client ("" when it has none) and run.
func (s Subjects) ParseRunInput(subject string) (client string, run RunID, ok bool) {
	rest, ok := strings.CutPrefix(subject, s.p()+".run.input.")
	if !ok {
		return "", "", false
	}
	client, token, two := strings.Cut(rest, ".")
	if !two {
		client, token = "", rest
	}
	if (two && !ValidToken(client)) || strings.Contains(token, ".") {
		return "", "", false
	}
	run, err := ParseRunID(token)
	return client, run, err == nil
}
