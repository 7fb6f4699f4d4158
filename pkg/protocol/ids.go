package protocol

import "crypto/rand"

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

// ToolName names a tool. Valid names match [TokenPattern].
type ToolName = string

// RunID identifies one run of the loop. Coordinators generate it with [NewID].
type RunID = string

// CallKey identifies one tool call of a run on the wire. Coordinators generate
// it with [NewID]; it is never the model's call id, which is untrusted.
type CallKey = string

// CallID is the model's own tool_call_id. It is untrusted text: it is echoed
// back to the model but never becomes a subject token or a dedup key.
type CallID = string

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
