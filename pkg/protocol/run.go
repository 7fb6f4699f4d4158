package protocol

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"math/big"
	"strconv"
	"strings"
	"time"
)

// DefaultMaxRunRequestBytes is the size limit of a run request when the
// service configures none: 256 KiB, room for a long prompt or transcript.
const DefaultMaxRunRequestBytes = 256 << 10

// MaxRequireApproval bounds the tool names a run request may list in
// require_approval.
const MaxRequireApproval = 64

// RunRequest asks the fleet to run the loop once. A submitter sends it as a
// request on [Subjects.RunSubmit]; the coordinator that takes it queues it
// in the runs stream and replies with a [RunResponse].
//
// "v" may be omitted (people type requests by hand); if present it must be
// 1. Exactly one of Prompt and Messages is required.
//
// The limits may only lower what the operator configured: 0 (or absent)
// means the operator's limit, a value above it is clamped to it, and the
// stored [RunResult] lists the limits applied and which were clamped.
// RequireApproval may only add tools that need a human's approval.
type RunRequest struct {
	V int `json:"v,omitempty"`
	// Prompt is the user's message.
	Prompt string `json:"prompt,omitempty"`
	// Messages is a transcript in the OpenAI chat format to continue,
	// instead of a prompt: a JSON array of {role, content, tool_calls,
	// tool_call_id} objects. The coordinator checks it in full.
	Messages json.RawMessage `json:"messages,omitempty"`
	// MaxRounds lowers the operator's max_rounds.
	MaxRounds int `json:"max_rounds,omitempty"`
	// MaxToolCallsPerRound lowers the operator's max_tool_calls_per_round.
	MaxToolCallsPerRound int `json:"max_tool_calls_per_round,omitempty"`
	// MaxObservationChars lowers the operator's max_observation_chars.
	MaxObservationChars int `json:"max_observation_chars,omitempty"`
	// ToolTimeoutMS lowers every call's timeout: a call gets the smaller of
	// this and the timeout it would otherwise have (the operator's override,
	// else its tool's own, else 30s).
	ToolTimeoutMS int64 `json:"tool_timeout_ms,omitempty"`
	// RequireApproval names tools (or "*") whose calls need a human's
	// approval in this run, on top of those the operator and the tools
	// themselves require.
	RequireApproval []string `json:"require_approval,omitempty"`
	// DryRun makes the run a dry run: only tools declared read-only run,
	// every other call is gated as usual and answered simulated
	// (loop.Config.DryRun). An agent may be a dry run whatever this says.
	DryRun bool `json:"dry_run,omitempty"`
	// Class sets the run's priority class, "interactive" or "batch",
	// over its agent's ("" keeps the agent's; interactive without one).
	Class string `json:"class,omitempty"`
	// Agent names the agent the run is for: the <agent> token of the
	// submission subject ([Subjects.RunSubmission]) the coordinator read
	// it from, never the body ([DefaultAgent] when the client named none).
	Agent string `json:"-"`
}

// HasMessages reports whether the request carries a transcript.
func (r *RunRequest) HasMessages() bool {
	m := bytes.TrimSpace(r.Messages)
	return len(m) > 0 && !bytes.Equal(m, []byte("null"))
}

// Validate checks the fields' rules.
func (r *RunRequest) Validate() error {
	if r.V != 0 {
		if err := checkV(r.V); err != nil {
			return err
		}
	}
	hasPrompt := len(bytes.TrimSpace([]byte(r.Prompt))) > 0
	switch {
	case hasPrompt && r.HasMessages():
		return invalid("messages", "give a prompt or messages, not both")
	case !hasPrompt && !r.HasMessages():
		return missing("prompt")
	case r.HasMessages() && bytes.TrimSpace(r.Messages)[0] != '[':
		return invalid("messages", "must be an array of messages")
	case r.MaxRounds < 0:
		return invalid("max_rounds", "must be >= 0 (0 or absent: the operator's limit)")
	case r.MaxToolCallsPerRound < 0:
		return invalid("max_tool_calls_per_round", "must be >= 0 (0 or absent: the operator's limit)")
	case r.MaxObservationChars < 0:
		return invalid("max_observation_chars", "must be >= 0 (0 or absent: the operator's limit)")
	case r.ToolTimeoutMS < 0:
		return invalid("tool_timeout_ms", "must be >= 0 (0 or absent: the operator's limit)")
	case len(r.RequireApproval) > MaxRequireApproval:
		return invalid("require_approval", "lists more than 64 tools")
	case r.Class != "" && !Class(r.Class).Valid():
		return invalid("class", `must be "interactive" or "batch"`)
	}
	for _, name := range r.RequireApproval {
		if name != "*" && !ValidToken(name) {
			return invalid("require_approval", "must list tool names matching "+TokenPattern+" or *")
		}
	}
	return nil
}

// RunStatus says what a coordinator did with a submitted run request.
type RunStatus string

// The statuses of a [RunResponse].
const (
	// RunAccepted: the request is queued; its result will be stored under
	// its run id and announced on [Subjects.RunResult].
	RunAccepted RunStatus = "accepted"
	// RunRefused: the request was not queued; Error says why. Resubmitting
	// the same request gets the same answer unless the code is
	// "unavailable".
	RunRefused RunStatus = "refused"
)

// RunResponse is a coordinator's reply to a [RunRequest] on
// [Subjects.RunSubmit]. It comes as soon as the request is queued (or
// refused), not when the run ends.
type RunResponse struct {
	V      int       `json:"v"`
	Status RunStatus `json:"status"`
	// RunID names the accepted run: the key of its result in ResultBucket
	// and the last token of ResultSubject.
	RunID RunID `json:"run_id,omitempty"`
	// ResultSubject is where the result will be announced (core NATS).
	ResultSubject string `json:"result_subject,omitempty"`
	// ResultBucket is the KV bucket that will keep the result under
	// ResultKey.
	ResultBucket string `json:"result_bucket,omitempty"`
	// ResultKey is the result's key in ResultBucket: RunID, or
	// <client>.<RunID> for a run submitted on a client's own subject.
	// Default (empty, from an older coordinator): RunID.
	ResultKey string `json:"result_key,omitempty"`
	// Error says why a request was refused.
	Error *RunError `json:"error,omitempty"`
}

// Validate checks the fields' rules.
func (r *RunResponse) Validate() error {
	if err := checkV(r.V); err != nil {
		return err
	}
	switch r.Status {
	case RunAccepted:
		if !r.RunID.Valid() {
			return invalid("run_id", "must match "+TokenPattern)
		}
		if client, ok := strings.CutSuffix(r.ResultKey, "."+string(r.RunID)); r.ResultKey != "" && r.ResultKey != string(r.RunID) && (!ok || !ValidToken(client)) {
			return invalid("result_key", "must be the run id or <client>.<run id>")
		}
	case RunRefused:
		if r.Error == nil {
			return missing("error")
		}
	case "":
		return missing("status")
	default:
		return invalid("status", "must be accepted or refused")
	}
	if r.Error != nil {
		return r.Error.validate()
	}
	return nil
}

// Run error codes, beside the decoding codes of this package (too_large,
// malformed, unsupported_version, missing_field, invalid_field) that a
// refused request carries. Append-only.
const (
	// CodeUnavailable: the fleet cannot take the request now (the run queue
	// is full, or NATS failed); retrying later may work.
	CodeUnavailable = "unavailable"
	// CodeRunFailed: the run started but the model or the catalog failed;
	// the stored result still answers every tool call id.
	CodeRunFailed = "run_failed"
	// CodeAbandoned: the request was taken by coordinators as often as
	// allowed and none of them finished it (each stopped mid-run).
	CodeAbandoned = "abandoned"
	// CodeInternal: anything else; details are in the coordinator's logs,
	// never on the wire.
	CodeInternal = "internal"
)

// MaxRunErrorMessage bounds a [RunError]'s message.
const MaxRunErrorMessage = 500

// RunError says why a request was refused or a run failed. Message is for
// people and never quotes the request's values, an error's text or a tool's
// output.
type RunError struct {
	Code    string `json:"code"`
	Field   string `json:"field,omitempty"`
	Message string `json:"message"`
}

func (e *RunError) validate() error {
	switch {
	case e.Code == "":
		return missing("error.code")
	case len(e.Code) > 64 || len(e.Field) > 128:
		return invalid("error", "code or field too long")
	case len(e.Message) > MaxRunErrorMessage:
		return invalid("error.message", "longer than 500 bytes")
	}
	return nil
}

// RunErrorFrom turns err into a [RunError] safe for the wire: a
// [*Error] keeps its code, field and message (which never quote input);
// anything else becomes code "internal" with a generic message.
func RunErrorFrom(err error) *RunError {
	var pe *Error
	if errors.As(err, &pe) {
		return &RunError{Code: pe.Code, Field: pe.Field, Message: pe.Msg}
	}
	return &RunError{Code: CodeInternal, Message: "internal error; see the coordinator's logs"}
}

// RunLimits are the loop limits a run was given, after the request's
// lowering and the operator's ceilings.
type RunLimits struct {
	MaxRounds            int `json:"max_rounds"`
	MaxToolCallsPerRound int `json:"max_tool_calls_per_round"`
	MaxObservationChars  int `json:"max_observation_chars"`
	// ToolTimeoutMS bounds every call's timeout; 0 means each tool's own
	// (else 30s).
	ToolTimeoutMS int64 `json:"tool_timeout_ms,omitempty"`
	// RequireApproval lists the tools ("*": all) whose calls needed a
	// human's approval, besides tools that declare it themselves.
	RequireApproval []string `json:"require_approval,omitempty"`
	// DryRun: the run was a dry run (its request's or its agent's).
	DryRun bool `json:"dry_run,omitempty"`
}

// RunResult is the result of one served run: the run's result object as
// "coordinator run --output json" prints it (run_id, answer,
// termination_reason, metadata, calls, messages) plus the serving fields.
// It is stored in the runs bucket under its run id and announced on
// [Subjects.RunResult]. A request that could not run has Error set and no
// termination reason; a run that failed has both.
type RunResult struct {
	V     int   `json:"v"`
	RunID RunID `json:"run_id"`
	// Submission and Agent are the submission id and agent tokens of the
	// subject the run was submitted on ([Subjects.RunSubmission]).
	Submission string `json:"submission_id,omitempty"`
	Agent      string `json:"agent,omitempty"`
	// Answer, TerminationReason, Metadata, Calls and Messages are the
	// loop's result, unchanged.
	Answer            string          `json:"answer"`
	TerminationReason string          `json:"termination_reason,omitempty"`
	Metadata          json.RawMessage `json:"metadata,omitempty"`
	Calls             json.RawMessage `json:"calls,omitempty"`
	Messages          json.RawMessage `json:"messages,omitempty"`
	// DryRun and SideEffects are the loop's result's: the run was a dry
	// run; the calls of tools not declared idempotent that ran or may have
	// run.
	DryRun      bool            `json:"dry_run,omitempty"`
	SideEffects json.RawMessage `json:"side_effects,omitempty"`
	// ParkReason is set with termination reason "parked": the run's model
	// failed after its retries, and the run waits, unowned, for an
	// operator's "coordinator runs resume". Its result is replaced when
	// the resumed run ends.
	ParkReason string `json:"park_reason,omitempty"`
	// ResumedBy is set on a parked result once an operator asked to
	// resume the run (who asked): a coordinator that takes the run then
	// continues it. Until then a submission of the parked run (a client's
	// retry) is acknowledged and not run: only an operator resumes it.
	ResumedBy string `json:"resumed_by,omitempty"`
	// TranscriptOmitted is true when Messages was left out to keep the
	// result under the bucket's value limit.
	TranscriptOmitted bool `json:"transcript_omitted,omitempty"`
	// Coordinator names the coordinator that ran it.
	Coordinator string `json:"coordinator,omitempty"`
	// Attempt counts deliveries of the request, from 1: above 1, an earlier
	// coordinator took it and did not finish (the run was resumed from its
	// journal).
	Attempt int `json:"attempt,omitempty"`
	// Limits are the limits applied; Clamped names the request's limits
	// that were above the operator's ceiling and were lowered to it.
	Limits  *RunLimits `json:"limits,omitempty"`
	Clamped []string   `json:"clamped,omitempty"`
	// SubmittedAt is when the request was queued, StartedAt and FinishedAt
	// when this coordinator ran it.
	SubmittedAt time.Time `json:"submitted_at,omitzero"`
	StartedAt   time.Time `json:"started_at,omitzero"`
	FinishedAt  time.Time `json:"finished_at,omitzero"`
	// Error says why the request could not run, or why the run failed.
	Error *RunError `json:"error,omitempty"`
}

// TerminationParked is the termination reason of a parked run's result
// (loop.TerminationParked).
const TerminationParked = "parked"

// Parked reports whether r is a parked run's result: the run is not over.
func (r *RunResult) Parked() bool { return r.TerminationReason == TerminationParked }

// Validate checks the fields' rules.
func (r *RunResult) Validate() error {
	if err := checkV(r.V); err != nil {
		return err
	}
	switch {
	case r.RunID == "":
		return missing("run_id")
	case !r.RunID.Valid():
		return invalid("run_id", "must match "+TokenPattern)
	case r.TerminationReason == "" && r.Error == nil:
		return missing("termination_reason")
	case len(r.TerminationReason) > 64:
		return invalid("termination_reason", "too long")
	case r.Attempt < 0:
		return invalid("attempt", "must be >= 0")
	}
	if r.Error != nil {
		return r.Error.validate()
	}
	return nil
}

// DecodeRunRequest decodes and validates a [RunRequest]. limit 0 means
// [DefaultMaxRunRequestBytes].
func DecodeRunRequest(data []byte, limit int) (RunRequest, error) {
	if limit <= 0 {
		limit = DefaultMaxRunRequestBytes
	}
	var m RunRequest
	err := decode(data, limit, &m)
	return m, err
}

// DecodeRunResponse decodes and validates a [RunResponse].
func DecodeRunResponse(data []byte, limit int) (RunResponse, error) {
	var m RunResponse
	err := decode(data, limit, &m)
	return m, err
}

// DecodeRunResult decodes and validates a [RunResult].
func DecodeRunResult(data []byte, limit int) (RunResult, error) {
	var m RunResult
	err := decode(data, limit, &m)
	return m, err
}

// SubmissionMsgID is the Nats-Msg-Id of client's submission: scoped by
// the client, so two clients choosing the same submission id never
// collide in the runs stream's duplicate window:
// submit-<len(client)>-<client>-<submission>.
func SubmissionMsgID(client, submission string) string {
	return "submit-" + strconv.Itoa(len(client)) + "-" + client + "-" + submission
}

// ResubmissionMsgID is the Nats-Msg-Id of a submission stored again
// when the parked run it started is resumed (seq, the journal sequence of
// its parked entry, names the resume): [SubmissionMsgID] and
// ".resume-<seq>", so the runs stream's duplicate window does not drop it
// as the first, and the submission id it names is the same.
func ResubmissionMsgID(client, submission string, seq uint64) string {
	return SubmissionMsgID(client, submission) + resubmissionMark + strconv.FormatUint(seq, 10)
}

// resubmissionMark separates a resubmission's seq from its submission id.
const resubmissionMark = ".resume-"

// digits tells a non-empty run of ASCII digits.
func digits(s string) bool {
	if s == "" || len(s) > 20 {
		return false
	}
	for _, c := range []byte(s) {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// SubmissionRunID is the run id of client's submission: a 22-character
// token derived (SHA-256) from both, so a client knows where its result
// will be ([RunKey]) before any coordinator runs it, a retry of the same
// submission names the same run, and two clients never share a run.
func SubmissionRunID(client, submission string) RunID {
	sum := sha256.Sum256([]byte("toolfleet-run\x00" + client + "\x00" + submission))
	var b [22]byte
	n := new(big.Int).SetBytes(sum[:])
	base := big.NewInt(int64(len(idAlphabet)))
	var m big.Int
	for i := range b {
		n.DivMod(n, base, &m)
		b[i] = idAlphabet[m.Int64()]
	}
	return RunID(b[:])
}
