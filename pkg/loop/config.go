package loop

import (
	"errors"
	"fmt"
	"go.opentelemetry.io/otel/trace"
	"time"

	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// Defaults, applied to every zero-valued field of [Config].
const (
	DefaultMaxRounds            = 8
	DefaultMaxToolCallsPerRound = 32
	DefaultMaxObservationChars  = protocol.DefaultMaxObservationChars
	// DefaultToolTimeout bounds a call whose tool declares no timeout of its
	// own, when Config.ToolTimeout is not set (protocol.CallTimeout).
	DefaultToolTimeout     = protocol.DefaultToolTimeout
	DefaultApprovalTimeout = 2 * time.Minute
	// DefaultGrace is protocol.DefaultCallGrace: a call that carries no
	// grace of its own is given this one by workers too.
	DefaultGrace         = protocol.DefaultCallGrace
	DefaultCancelTimeout = 2 * time.Second
	// DefaultMaxToolCallsKept is the default ceiling on the calls of one
	// model response kept in the transcript (never below
	// MaxToolCallsPerRound+1).
	DefaultMaxToolCallsKept = 128
	// DefaultMaxTranscriptBytes bounds the transcript a run sends the
	// model: 8 rounds of 32 calls of 12000 characters fit 5 times over.
	DefaultMaxTranscriptBytes = 16 << 20
	// DefaultMaxRunDuration bounds a run's wall-clock time.
	DefaultMaxRunDuration = time.Hour
	// DefaultDedupWindow is the calls stream's duplicate window
	// (natsbus.DuplicateWindow).
	DefaultDedupWindow = 2 * time.Minute
)

// Config tunes a [Runner]. Its zero value is ready to use: every zero field
// means the default named in its comment. Negative values are refused by
// [Config.Validate].
type Config struct {
	// MaxRounds bounds the model calls of a run. Default: 8.
	MaxRounds int
	// MaxToolCallsPerRound bounds the calls of one assistant message that
	// are executed; the rest are rejected unseen. It is also the bound on
	// the goroutines a round uses. Default: 32.
	MaxToolCallsPerRound int
	// MaxObservationChars bounds every tool message, in runes, marker
	// included. Default: 12000.
	MaxObservationChars int
	// MaxToolCallsKept is a hard ceiling on the calls of one model response
	// kept in the transcript: calls past MaxToolCallsPerRound are answered
	// rejected up to it, and calls past it are dropped from the stored
	// assistant message (so every id that stays is answered exactly once),
	// noted once to the model and counted in Metadata.DroppedToolCalls. A
	// model answering 70,000 calls a round cannot grow a run past it. It
	// must exceed MaxToolCallsPerRound. Default: max(128,
	// MaxToolCallsPerRound+1).
	MaxToolCallsKept int
	// MaxTranscriptBytes bounds the transcript's total bytes (contents,
	// ids, names and arguments): a run whose transcript grows past it ends
	// with termination reason "error" and ErrTranscriptTooLarge before the
	// next model call. Default: 16 MiB.
	MaxTranscriptBytes int
	// MaxRunDuration bounds a run's wall-clock time: past it the run ends
	// as if cancelled (every open call answered), with termination reason
	// "error" and ErrRunBudget. Default: 1h.
	MaxRunDuration time.Duration
	// ToolTimeout, when set, overrides every tool's own timeout. When zero,
	// each call gets its tool's TimeoutMS, or DefaultToolTimeout (30s) if
	// the tool declares none. Time queued counts against it.
	ToolTimeout time.Duration
	// ApprovalTimeout bounds the wait for a human's decision; no decision in
	// time denies the call as approval_expired. Default: 2m.
	ApprovalTimeout time.Duration
	// RequireApproval names the tools whose calls need approval, or holds
	// "*" for all of them. Tools whose spec says RequiresApproval always
	// need it.
	RequireApproval []string
	// MaxHistoryMessages bounds the messages of each model request: the
	// first messages and the newest blocks that fit, an assistant message
	// never separated from its tool messages (window.go). The stored
	// transcript and the journal keep everything. Default (0): the whole
	// transcript.
	MaxHistoryMessages int
	// Summarizer, when set with MaxHistoryMessages, summarizes what a
	// window leaves out into a system message after the first messages;
	// its tokens and cost count against Budget. Default: none.
	Summarizer Model
	// Budget bounds the run's tokens, cost and tool calls (budget.go).
	// Default: unlimited.
	Budget Budget
	// TraceArgs logs argument values in tool-call trace lines. Default:
	// off, only argument keys and a digest are logged.
	TraceArgs bool
	// Grace is how long past a call's deadline the loop still waits for its
	// result before answering timeout. Every call carries it
	// (protocol.CallDeadline), and a worker keeps trying to publish a
	// result for as long. It also bounds the wait for a gate past an
	// approval's deadline. Default: 500ms (protocol.DefaultCallGrace).
	// Workers are told at most protocol.MaxCallGrace.
	Grace time.Duration
	// DedupWindow is how long the transport deduplicates a published call
	// by its key (the calls stream's duplicate window). A resumed durable
	// run publishes a non-idempotent call again only within it of the
	// call's first dispatch: past it, a second publish would be a new call
	// that could run a second time, so the call is not published again but
	// awaited, and answered outcome_unknown at its deadline. Default: 2m.
	DedupWindow time.Duration
	// CancelTimeout bounds the publishing of cancel messages, which goes on
	// after the run's context has ended. Default: 2s.
	CancelTimeout time.Duration
	// DryRun runs only the tools whose spec declares them read-only
	// (protocol.ToolSpec.ReadOnly): every other call is validated, gated
	// and asked approval for as usual, then answered simulated with what
	// would have run (tool, argument keys, digest) instead of being
	// published. A durable dry run stays one whoever resumes it
	// (RunPolicy). Default: false.
	DryRun bool
	// Logger receives the trace lines. The zero value discards them.
	Logger zerolog.Logger
	// TracerProvider makes the OpenTelemetry spans of each run, round, model
	// call and tool call (see the package doc). Default: the global
	// provider, which records nothing unless the process installed one.
	TracerProvider trace.TracerProvider

	// Observer receives measurements (model calls, call outcomes,
	// approvals, runs) for metrics. Default: nil, observe nothing.
	Observer Observer
	// Now is the clock that stamps deadlines and measures durations; the
	// loop waits on real timers, so it must advance with real time.
	// Default: time.Now.
	Now func() time.Time
	// NewID makes run ids, call keys and replacement call ids; it must
	// return strings that match protocol.TokenPattern. Default:
	// protocol.NewID.
	NewID func() string
}

// withDefaults returns c with every zero field set to its default.
func (c Config) withDefaults() Config {
	if c.MaxRounds == 0 {
		c.MaxRounds = DefaultMaxRounds
	}
	if c.MaxToolCallsPerRound == 0 {
		c.MaxToolCallsPerRound = DefaultMaxToolCallsPerRound
	}
	if c.MaxObservationChars == 0 {
		c.MaxObservationChars = DefaultMaxObservationChars
	}
	if c.ApprovalTimeout == 0 {
		c.ApprovalTimeout = DefaultApprovalTimeout
	}
	if c.Grace == 0 {
		c.Grace = DefaultGrace
	}
	if c.DedupWindow == 0 {
		c.DedupWindow = DefaultDedupWindow
	}
	if c.CancelTimeout == 0 {
		c.CancelTimeout = DefaultCancelTimeout
	}
	if c.MaxToolCallsKept == 0 {
		c.MaxToolCallsKept = max(DefaultMaxToolCallsKept, c.MaxToolCallsPerRound+1)
	}
	if c.MaxTranscriptBytes == 0 {
		c.MaxTranscriptBytes = DefaultMaxTranscriptBytes
	}
	if c.MaxRunDuration == 0 {
		c.MaxRunDuration = DefaultMaxRunDuration
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.NewID == nil {
		c.NewID = protocol.NewID
	}
	if c.Observer == nil {
		c.Observer = NopObserver{}
	}
	return c
}

// ErrInvalidConfig is the error every [*ConfigError] wraps, so callers can
// tell a refused configuration (a usage error) from a failed run.
var ErrInvalidConfig = errors.New("invalid loop config")

// ConfigError names a configuration field, its value and the rule it
// breaks. It is a [config.Error]; Field is the [Config] field's Go name
// ("MaxRounds"), or the argument of [New] that is missing.
type ConfigError struct {
	Field string
	Value any
	Rule  string
}

func (e *ConfigError) Error() string {
	return e.Field + " " + e.ConfigProblem()
}

// ConfigField returns e.Field.
func (e *ConfigError) ConfigField() string { return e.Field }

// ConfigProblem returns the rule and the value.
func (e *ConfigError) ConfigProblem() string { return fmt.Sprintf("%s, got %v", e.Rule, e.Value) }

// Unwrap returns [ErrInvalidConfig].
func (e *ConfigError) Unwrap() error { return ErrInvalidConfig }

// Validate checks c after defaults are applied: every count must be >= 1,
// every duration > 0 (ToolTimeout may be 0, meaning each tool's own), and
// RequireApproval must hold tool names or "*". The error is a
// [*ConfigError].
func (c Config) Validate() error {
	c = c.withDefaults()
	type intRule struct {
		field string
		v     int
	}
	for _, r := range []intRule{
		{"MaxRounds", c.MaxRounds},
		{"MaxToolCallsPerRound", c.MaxToolCallsPerRound},
		{"MaxObservationChars", c.MaxObservationChars},
		{"MaxTranscriptBytes", c.MaxTranscriptBytes},
	} {
		if r.v < 1 {
			return &ConfigError{Field: r.field, Value: r.v, Rule: "must be >= 1"}
		}
	}
	if c.MaxToolCallsKept <= c.MaxToolCallsPerRound {
		return &ConfigError{Field: "MaxToolCallsKept", Value: c.MaxToolCallsKept,
			Rule: fmt.Sprintf("must be more than the tool calls per round (%d)", c.MaxToolCallsPerRound)}
	}
	type durRule struct {
		field string
		v     time.Duration
	}
	for _, r := range []durRule{
		{"ToolTimeout", c.ToolTimeout},
		{"ApprovalTimeout", c.ApprovalTimeout},
		{"Grace", c.Grace},
		{"DedupWindow", c.DedupWindow},
		{"CancelTimeout", c.CancelTimeout},
		{"MaxRunDuration", c.MaxRunDuration},
	} {
		if r.v < 0 || (r.v == 0 && r.field != "ToolTimeout") {
			return &ConfigError{Field: r.field, Value: r.v, Rule: "must be > 0"}
		}
	}
	if c.MaxHistoryMessages < 0 {
		return &ConfigError{Field: "MaxHistoryMessages", Value: c.MaxHistoryMessages, Rule: "must be >= 0 (0: the whole transcript)"}
	}
	if err := c.Budget.validate(); err != nil {
		return err
	}
	for _, name := range c.RequireApproval {
		if name != "*" && !validToolName(name) {
			return &ConfigError{Field: "RequireApproval", Value: quoteClipped(name), Rule: "must list tool names or *"}
		}
	}
	return nil
}
