package protocol

import (
	"crypto/rand"
	"fmt"
)

// TokenPattern is the rule every model- or operator-influenced subject token
// must match: the OpenAI function-name rule, which is also safe as a NATS
// subject token (no '.', '*', '>' or whitespace).
const TokenPattern = `^[A-Za-z0-9_-]{1,64}$`

// maxTokenLen is the longest token TokenPattern allows.
const maxTokenLen = 64

// ValidToken reports whether s may be used as one subject token: whether it
// matches [TokenPattern]. It checks bytes by hand (every id, key and tool
// name of every message goes through it) and agrees with the pattern on
// every input (FuzzValidToken).
func ValidToken(s string) bool {
	if len(s) == 0 || len(s) > maxTokenLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}

// The id types below are defined types, not aliases, so the compiler keeps
// them apart: a subject builder of [Subjects] takes a [RunID], a [CallKey]
// or a [ToolName], never a [CallID] (the model's own text) nor a bare
// string. A string becomes one of them at a trust boundary only: by
// decoding a wire message (whose Validate checks every token), by
// [ParseToolName], [ParseRunID] or [ParseCallKey], which validate, or by
// [NewRunID] and [NewCallKey], which draw a fresh valid token.

// ToolName names a tool. Valid names match [TokenPattern].
type ToolName string

// RunID identifies one run of the loop. Coordinators generate it with
// [NewRunID].
type RunID string

// CallKey identifies one tool call of a run on the wire. Coordinators
// generate it with [NewCallKey]; it is never the model's call id, which is
// untrusted.
type CallKey string

// CallID is the model's own tool_call_id. It is untrusted text: it is echoed
// back to the model but never becomes a subject token or a dedup key. No
// builder of [Subjects] accepts one.
type CallID string

// Valid reports whether t is a valid tool name: whether it matches
// [TokenPattern].
func (t ToolName) Valid() bool { return ValidToken(string(t)) }

// Valid reports whether r is a valid run id: whether it matches
// [TokenPattern].
func (r RunID) Valid() bool { return ValidToken(string(r)) }

// Valid reports whether k is a valid call key: whether it matches
// [TokenPattern].
func (k CallKey) Valid() bool { return ValidToken(string(k)) }

// ParseToolName returns s as a [ToolName], or an [Error] with code
// [CodeInvalidField] (field "tool") if s does not match [TokenPattern].
// It is the one conversion of untrusted text, such as the tool name a
// model wrote, into a tool name.
func ParseToolName(s string) (ToolName, error) {
	if !ValidToken(s) {
		return "", invalidToken("tool", s)
	}
	return ToolName(s), nil
}

// ParseRunID returns s as a [RunID], or an [Error] with code
// [CodeInvalidField] (field "run_id") if s does not match [TokenPattern].
func ParseRunID(s string) (RunID, error) {
	if !ValidToken(s) {
		return "", invalidToken("run_id", s)
	}
	return RunID(s), nil
}

// ParseCallKey returns s as a [CallKey], or an [Error] with code
// [CodeInvalidField] (field "call_key") if s does not match [TokenPattern].
func ParseCallKey(s string) (CallKey, error) {
	if !ValidToken(s) {
		return "", invalidToken("call_key", s)
	}
	return CallKey(s), nil
}

func invalidToken(field, s string) error {
	return &Error{Code: CodeInvalidField, Field: field, Msg: fmt.Sprintf("%q must match %s", clip(s), TokenPattern)}
}

// NewRunID returns a fresh random run id ([NewID]).
func NewRunID() RunID { return RunID(NewID()) }

// NewCallKey returns a fresh random call key ([NewID]).
func NewCallKey() CallKey { return CallKey(NewID()) }

const idAlphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// NewID returns a random 22-character identifier (about 131 bits) made of
// letters and digits, valid as a subject token.
func NewID() string {
	var b [22]byte
	rand.Read(b[:]) // crypto/rand.Read never returns an error.
	for i := range b {
		b[i] = idAlphabet[int(b[i])%len(idAlphabet)]
	}
	return string(b[:])
}
