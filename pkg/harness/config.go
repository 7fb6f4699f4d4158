package harness

import (
	"errors"
	"time"

	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// Defaults of [Config].
const (
	// DefaultMaxOutputChars bounds any tool output, in runes: the fleet's
	// [protocol.DefaultMaxOutputChars], which fits one result message.
	DefaultMaxOutputChars = protocol.DefaultMaxOutputChars
	// DefaultMaxAbandoned bounds the Go tools still running after their
	// deadline or cancel.
	DefaultMaxAbandoned = 64
)

// Config configures a [Harness]. The zero value is ready to use: every zero
// field means its default.
type Config struct {
	// MaxOutputChars is a hard bound, in runes, on any output; a call may ask
	// for less with [Call].MaxOutputChars. Default: 100,000.
	MaxOutputChars int
	// MaxAbandoned bounds the Go tools still running after their deadline or
	// cancel (they ignored their context). While the count is at the bound,
	// new calls of Go tools are refused with outcome failed and ErrorType
	// "harness.Overloaded", never run, and logged. Default: 64.
	MaxAbandoned int
	// LogStderr logs exec tools' stderr (truncated). Stderr may hold secrets,
	// so it is never logged unless this is set. Default: false.
	LogStderr bool
	// Logger receives one line per call run with [Harness.Execute] (none
	// for [Harness.ExecuteUnlogged], whose caller logs the call) and the
	// harness's warnings. The zero value discards.
	Logger zerolog.Logger
	// Now tells the time for [Result].Duration. Deadlines always use the
	// real clock, as contexts do. Default: time.Now.
	Now func() time.Time
}

// withDefaults returns c with every zero field set to its default.
func (c Config) withDefaults() Config {
	if c.MaxOutputChars == 0 {
		c.MaxOutputChars = DefaultMaxOutputChars
	}
	if c.MaxAbandoned == 0 {
		c.MaxAbandoned = DefaultMaxAbandoned
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Validate checks the fields' rules. A zero field is valid (it means the
// default).
func (c Config) Validate() error {
	var errs []error
	if c.MaxOutputChars < 0 {
		errs = append(errs, errors.New("MaxOutputChars must be >= 0 (0: default 100000)"))
	}
	if c.MaxAbandoned < 0 {
		errs = append(errs, errors.New("MaxAbandoned must be >= 0 (0: default 64)"))
	}
	return errors.Join(errs...)
}
