package approval

import (
	"time"

	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// GateConfig configures a [Gate]. Its zero value is ready to use.
type GateConfig struct {
	// Logger receives one line per request settled and per decision ignored.
	// Default: the zero Logger, which discards.
	Logger zerolog.Logger
	// MaxMessageBytes bounds an encoded request; a larger one is not
	// published and Approve returns an error. Decisions are decoded with the
	// smaller of this and 8 KiB. Default: protocol.DefaultMaxMessageBytes.
	MaxMessageBytes int
	// Now tells the time: a decision counts only if Now is before the
	// request's deadline when it arrives. Default: time.Now.
	Now func() time.Time
	// NoteTimeout bounds the publication of the outcome note after a request
	// is settled. Default: 2s.
	NoteTimeout time.Duration
}

const (
	// maxDecisionBytes bounds a decision on decode: digest, a 500-byte
	// reason and a 128-byte approver fit with room to spare.
	maxDecisionBytes = 8 << 10
	// maxPendingDecisions bounds the decisions buffered for one request
	// before the client drops them (a flood of junk cannot grow memory).
	maxPendingDecisions = 256
	defaultNoteTimeout  = 2 * time.Second
)

func (c GateConfig) withDefaults() GateConfig {
	if c.MaxMessageBytes <= 0 {
		c.MaxMessageBytes = protocol.DefaultMaxMessageBytes
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.NoteTimeout <= 0 {
		c.NoteTimeout = defaultNoteTimeout
	}
	return c
}

func (c GateConfig) decisionLimit() int { return min(c.MaxMessageBytes, maxDecisionBytes) }
