package protocol

import (
	"encoding/json"
	"time"
)

// Version is the protocol version this package speaks.
const Version = 1

// Call asks a worker to run one tool call. It travels on [Subjects.Call]
// in the calls stream.
type Call struct {
	V         int             `json:"v"`
	RunID     RunID           `json:"run_id"`
	Round     int             `json:"round"`
	CallKey   CallKey         `json:"call_key"`
	CallID    CallID          `json:"call_id"`
	Tool      ToolName        `json:"tool"`
	Arguments json.RawMessage `json:"arguments"`
	// Deadline is absolute: time spent queued counts against it.
	Deadline time.Time `json:"deadline"`
	// GraceMS is how long past Deadline the coordinator still awaits the
	// result, and so how long a worker keeps trying to publish it, in
	// milliseconds. 0 (omitted): [DefaultCallGrace]. See [CallDeadline].
	GraceMS int64 `json:"grace_ms,omitempty"`
	// Attempt is always 1 and read by no one.
	//
	// Deprecated: kept only on the wire. Workers of earlier releases
	// refuse a call without "attempt" >= 1, so [Encode] writes 1 when it
	// is 0, and decoders accept it (any value >= 0, absent included) from
	// coordinators of earlier releases. Leave it unset.
	Attempt int `json:"attempt"`
	// MaxOutputChars is the coordinator's bound on the observation; the
	// worker truncates output to [OutputLimit] of this and its own bound.
	// 0: the worker's.
	MaxOutputChars int `json:"max_output_chars,omitempty"`
	// RequiresApproval says the coordinator held the call for an operator's
	// approval. A worker then runs it only with a valid Approval, as it
	// does for every call of a tool its own manifest marks.
	RequiresApproval bool `json:"requires_approval,omitempty"`
	// Approval points at the operator's decision in the approvals stream,
	// which the worker reads back and checks itself before running a call
	// that needs approval.
	Approval *ApprovalProof `json:"approval,omitempty"`
}

// ApprovalProof names the approvals-stream messages that approved a call:
// the request the coordinator published and the operator's decision. The
// sequences are only pointers; a worker trusts what it reads there, never
// this struct.
type ApprovalProof struct {
	RequestSeq  uint64 `json:"request_seq"`
	DecisionSeq uint64 `json:"decision_seq"`
}

// Validate checks the fields' rules.
func (c *Call) Validate() error {
	if err := checkV(c.V); err != nil {
		return err
	}
	switch {
	case c.RunID == "":
		return missing("run_id")
	case !c.RunID.Valid():
		return invalid("run_id", "must match "+TokenPattern)
	case c.CallKey == "":
		return missing("call_key")
	case !c.CallKey.Valid():
		return invalid("call_key", "must match "+TokenPattern)
	case c.Tool == "":
		return missing("tool")
	case !c.Tool.Valid():
		return invalid("tool", "must match "+TokenPattern)
	case len(c.Arguments) == 0:
		return missing("arguments")
	case c.Deadline.IsZero():
		return missing("deadline")
	case c.Round < 1:
		return invalid("round", "must be >= 1")
	case c.Attempt < 0:
		return invalid("attempt", "must be >= 0")
	case len(c.CallID) > MaxCallIDLen:
		return invalid("call_id", "too long")
	case c.GraceMS < 0 || c.GraceMS > MaxCallGrace.Milliseconds():
		return invalid("grace_ms", "must be between 0 and 3600000")
	case c.MaxOutputChars < 0:
		return invalid("max_output_chars", "must be >= 0")
	case c.Approval != nil && (c.Approval.RequestSeq == 0 || c.Approval.DecisionSeq <= c.Approval.RequestSeq):
		return invalid("approval", "needs a request_seq and a later decision_seq")
	}
	return nil
}

// MaxCallIDLen bounds the model's call id carried on the wire.
const MaxCallIDLen = 256

// Result answers one call. Workers publish it on the subject named by the
// call's [HeaderReplyTo] header, into the results stream.
type Result struct {
	V       int     `json:"v"`
	RunID   RunID   `json:"run_id"`
	CallKey CallKey `json:"call_key"`
	Outcome Outcome `json:"outcome"`
	// Output is the tool's output (outcome ok) or, for invalid_arguments,
	// the validator's message. It is already truncated by the worker.
	Output    string `json:"output,omitempty"`
	Truncated bool   `json:"truncated,omitempty"`
	// ErrorType is the Go type or exec status of a failure, never its message.
	ErrorType  string `json:"error_type,omitempty"`
	DurationMS int64  `json:"duration_ms"`
	Worker     string `json:"worker,omitempty"`
	// Attempt is the JetStream delivery count of the call that produced it.
	Attempt int `json:"attempt,omitempty"`
	// RetryAfterMS (outcome rate_limited) is how long after the result the
	// tool's rate limit allows a call again.
	RetryAfterMS int64 `json:"retry_after_ms,omitempty"`
}

// Validate checks the fields' rules.
func (r *Result) Validate() error {
	if err := checkV(r.V); err != nil {
		return err
	}
	switch {
	case r.RunID == "":
		return missing("run_id")
	case !r.RunID.Valid():
		return invalid("run_id", "must match "+TokenPattern)
	case r.CallKey == "":
		return missing("call_key")
	case !r.CallKey.Valid():
		return invalid("call_key", "must match "+TokenPattern)
	case r.Outcome == "":
		return missing("outcome")
	case !r.Outcome.Valid():
		return invalid("outcome", "unknown outcome")
	case r.DurationMS < 0:
		return invalid("duration_ms", "must be >= 0")
	case r.RetryAfterMS < 0:
		return invalid("retry_after_ms", "must be >= 0")
	}
	return nil
}

// Started tells the coordinator that a worker started a call: it says
// nothing of the call's progress after that. It travels on core NATS
// ([Subjects.Started], whose token is still "progress"); losing one only
// weakens the distinction between timeout and outcome_unknown.
type Started struct {
	V       int     `json:"v"`
	RunID   RunID   `json:"run_id"`
	CallKey CallKey `json:"call_key"`
	Worker  string  `json:"worker,omitempty"`
	Attempt int     `json:"attempt,omitempty"`
}

// Validate checks the fields' rules.
func (p *Started) Validate() error {
	if err := checkV(p.V); err != nil {
		return err
	}
	return checkRunKey(p.RunID, p.CallKey)
}

// Cancel asks whichever worker runs a call to stop it. Core NATS,
// [Subjects.Cancel].
type Cancel struct {
	V       int     `json:"v"`
	RunID   RunID   `json:"run_id"`
	CallKey CallKey `json:"call_key"`
	Reason  string  `json:"reason,omitempty"`
}

// Validate checks the fields' rules.
func (c *Cancel) Validate() error {
	if err := checkV(c.V); err != nil {
		return err
	}
	return checkRunKey(c.RunID, c.CallKey)
}

// ApprovalRequest asks an operator to approve one call. It is published into
// the approvals stream on [Subjects.ApprovalRequest].
type ApprovalRequest struct {
	V         int             `json:"v"`
	RunID     RunID           `json:"run_id"`
	CallKey   CallKey         `json:"call_key"`
	CallID    CallID          `json:"call_id,omitempty"`
	Round     int             `json:"round"`
	Tool      ToolName        `json:"tool"`
	Arguments json.RawMessage `json:"arguments"`
	// Digest is [Digest] of run id, call key, tool and arguments. A decision
	// must echo it.
	Digest string `json:"digest"`
	// Deadline is when the request expires and the call is not run.
	Deadline time.Time `json:"deadline"`
	// DecisionSubject is where the decision must be published.
	DecisionSubject string `json:"decision_subject"`
}

// Validate checks the fields' rules.
func (a *ApprovalRequest) Validate() error {
	if err := checkV(a.V); err != nil {
		return err
	}
	if err := checkRunKey(a.RunID, a.CallKey); err != nil {
		return err
	}
	switch {
	case !a.Tool.Valid():
		return invalid("tool", "must match "+TokenPattern)
	case len(a.Arguments) == 0:
		return missing("arguments")
	case a.Digest == "":
		return missing("digest")
	case a.Deadline.IsZero():
		return missing("deadline")
	}
	return nil
}

// ApprovalDecision is an operator's answer, published on
// [Subjects.ApprovalDecision]. "v" may be omitted (people type these by hand);
// if present it must be 1. Approved is required: a decision that does not say
// true or false is malformed, never a yes.
type ApprovalDecision struct {
	V        int    `json:"v,omitempty"`
	Digest   string `json:"digest"`
	Approved *bool  `json:"approved"`
	Reason   string `json:"reason,omitempty"`
	Approver string `json:"approver,omitempty"`
}

// MaxReasonLen bounds an operator's reason, which reaches the model.
const MaxReasonLen = 500

// Validate checks the fields' rules.
func (d *ApprovalDecision) Validate() error {
	if d.V != 0 {
		if err := checkV(d.V); err != nil {
			return err
		}
	}
	switch {
	case d.Digest == "":
		return missing("digest")
	case d.Approved == nil:
		return missing("approved")
	case len(d.Reason) > MaxReasonLen:
		return invalid("reason", "longer than 500 bytes")
	case len(d.Approver) > 128:
		return invalid("approver", "longer than 128 bytes")
	}
	return nil
}

// ToolSpec describes a tool to coordinators. Workers write it into the
// catalog bucket under the tool's name.
type ToolSpec struct {
	V           int             `json:"v"`
	Name        ToolName        `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
	// TimeoutMS is the tool's own timeout; 0 means the fleet default (30s).
	TimeoutMS        int64 `json:"timeout_ms,omitempty"`
	Idempotent       bool  `json:"idempotent,omitempty"`
	RequiresApproval bool  `json:"requires_approval,omitempty"`
	// ReadOnly declares that the tool changes nothing: a dry run runs only
	// such tools and answers every other call simulated. Default: false,
	// not read-only. A coordinator older than the field refuses a spec that
	// sets it (upgrade coordinators before workers).
	ReadOnly bool `json:"read_only,omitempty"`
	// SchemaDigest is [SchemaDigest] of Parameters, so coordinators and
	// workers can tell whether they agree on the schema.
	SchemaDigest string `json:"schema_digest"`
}

// Validate checks the fields' rules.
func (s *ToolSpec) Validate() error {
	if err := checkV(s.V); err != nil {
		return err
	}
	switch {
	case s.Name == "":
		return missing("name")
	case !s.Name.Valid():
		return invalid("name", "must match "+TokenPattern)
	case len(s.Parameters) == 0:
		return missing("parameters")
	case s.TimeoutMS < 0:
		return invalid("timeout_ms", "must be >= 0")
	case s.SchemaDigest == "":
		return missing("schema_digest")
	}
	return nil
}

// Timeout returns the tool's own timeout, or 0 when it has none.
func (s *ToolSpec) Timeout() time.Duration { return time.Duration(s.TimeoutMS) * time.Millisecond }

func checkV(v int) error {
	switch v {
	case Version:
		return nil
	case 0:
		return missing("v")
	default:
		return &Error{Code: CodeVersion, Field: "v", Msg: "this build speaks version 1"}
	}
}

func checkRunKey(run RunID, key CallKey) error {
	switch {
	case run == "":
		return missing("run_id")
	case !run.Valid():
		return invalid("run_id", "must match "+TokenPattern)
	case key == "":
		return missing("call_key")
	case !key.Valid():
		return invalid("call_key", "must match "+TokenPattern)
	}
	return nil
}
