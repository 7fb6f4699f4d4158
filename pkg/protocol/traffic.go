package protocol

import (
	"encoding/json"
	"math"
	"strings"
	"time"
)

// Actions recorded in a [TrafficNote].
const (
	// TrafficPause: the tool's calls stop being handed out until Until (or
	// until resumed).
	TrafficPause = "pause"
	// TrafficResume: the tool's calls are handed out again.
	TrafficResume = "resume"
	// TrafficLimit: the tool's fleet-wide rate limit is set to Rate and
	// Burst; Rate 0 removes the operator's limit.
	TrafficLimit = "limit"
)

// MaxTrafficNoteBytes bounds a [TrafficNote] on decode.
const MaxTrafficNoteBytes = 4 << 10

// TrafficNote is the audit record of an operator's traffic control of one
// tool (a pause, a resume, a rate limit). It is published on
// [Subjects.TrafficNote] into the approvals stream, the fleet's audit log,
// before the change takes effect: who, when, why and what.
type TrafficNote struct {
	V      int      `json:"v"`
	Tool   ToolName `json:"tool"`
	Action string   `json:"action"`
	// Until ends a pause; a pause until resumed carries the far future
	// ([PauseForever] from At).
	Until *time.Time `json:"until,omitempty"`
	// Rate (calls per second) and Burst: a limit's values.
	Rate  float64 `json:"rate,omitempty"`
	Burst int     `json:"burst,omitempty"`
	// By names the operator (as they gave it; the server only lets the
	// operator's credentials publish the note).
	By     string `json:"by,omitempty"`
	Reason string `json:"reason,omitempty"`
	// At is when the operator's command made the change.
	At time.Time `json:"at"`
}

// PauseForever is how long a pause without an end lasts.
const PauseForever = 100 * 365 * 24 * time.Hour

// Validate checks the fields' rules.
func (n *TrafficNote) Validate() error {
	if err := checkV(n.V); err != nil {
		return err
	}
	switch {
	case !n.Tool.Valid():
		return invalid("tool", "must match "+TokenPattern)
	case n.At.IsZero():
		return missing("at")
	case len(n.Reason) > MaxReasonLen:
		return invalid("reason", "longer than 500 bytes")
	case len(n.By) > 128:
		return invalid("by", "longer than 128 bytes")
	}
	switch n.Action {
	case TrafficPause:
		if n.Until == nil || n.Until.IsZero() {
			return missing("until")
		}
	case TrafficResume:
	case TrafficLimit:
		l := RateLimit{Rate: n.Rate, Burst: n.Burst}
		if err := l.Validate(); err != nil {
			return err
		}
	case "":
		return missing("action")
	default:
		return invalid("action", "unknown action")
	}
	return nil
}

// DecodeTrafficNote decodes and validates a [TrafficNote] strictly.
func DecodeTrafficNote(data []byte) (TrafficNote, error) {
	var n TrafficNote
	if err := decode(data, MaxTrafficNoteBytes, &n); err != nil {
		return TrafficNote{}, err
	}
	return n, nil
}

// EncodeTrafficNote encodes n as it is published.
func EncodeTrafficNote(n *TrafficNote) ([]byte, error) { return json.Marshal(n) }

// TrafficNote is the subject of the audit record of a traffic change of
// tool: <prefix>.traffic.<tool>, in the traffic stream (FLEET_TRAFFIC), a
// stream of its own, so that the kill switch never waits for room in the
// approvals stream.
func (s Subjects) TrafficNote(tool ToolName) (string, error) {
	return s.join("traffic", string(tool))
}

// TrafficNotes is the wildcard covering every traffic audit record.
func (s Subjects) TrafficNotes() string { return s.p() + ".traffic.>" }

// TrafficStream names the stream of traffic audit records (FLEET_TRAFFIC).
func (s Subjects) TrafficStream() string { return s.upper() + "_TRAFFIC" }

// LimitsBucket is the key-value bucket of the fleet's rate limits: key
// "limit.<tool>" is an operator's [RateLimit], key "bucket.<tool>" the
// state every worker shares to enforce it.
func (s Subjects) LimitsBucket() string { return strings.ReplaceAll(s.p(), "-", "_") + "_limits" }

// Bounds of a [RateLimit].
const (
	// MaxRate bounds a limit's calls per second.
	MaxRate = 1e6
	// MaxBurst bounds a limit's burst.
	MaxBurst = 1 << 20
	// MaxRateLimitBytes bounds a [RateLimit] on decode.
	MaxRateLimitBytes = 1 << 10
)

// RateLimit is a tool's fleet-wide rate limit: at most Rate calls start
// per second, with bursts of up to Burst calls. The zero value is no limit.
type RateLimit struct {
	// Rate is calls per second; 0: no limit.
	Rate float64 `json:"rate"`
	// Burst is how many calls may start at once after a quiet period;
	// 0 means 1.
	Burst int `json:"burst,omitempty"`
}

// Limited reports whether l limits anything.
func (l RateLimit) Limited() bool { return l.Rate > 0 }

// Validate checks the fields' rules.
func (l *RateLimit) Validate() error {
	switch {
	case math.IsNaN(l.Rate) || l.Rate < 0 || l.Rate > MaxRate:
		return invalid("rate", "must be between 0 and 1e6 calls per second")
	case l.Rate > 0 && l.Rate < 1e-3:
		return invalid("rate", "must be at least 0.001 calls per second (or 0: no limit)")
	case l.Burst < 0 || l.Burst > MaxBurst:
		return invalid("burst", "must be between 0 and 1048576")
	}
	return nil
}

// DecodeRateLimit decodes and validates a [RateLimit] strictly.
func DecodeRateLimit(data []byte) (RateLimit, error) {
	var l RateLimit
	if err := decode(data, MaxRateLimitBytes, &l); err != nil {
		return RateLimit{}, err
	}
	return l, nil
}
