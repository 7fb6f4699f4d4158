// Package logging builds the process logger of toolfleet's commands: zerolog
// JSON on stderr, or a human-readable console when stderr is a terminal.
// Packages under pkg/ never use it: they take a zerolog.Logger in their
// Config.
package logging

import (
	"io"
	"os"
	"strings"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/pkg/config"
)

// DefaultLevel is the level of an empty level.
const DefaultLevel = "info"

// New returns a logger writing to w at level ("debug", "info", "warn",
// "error"; empty means [DefaultLevel]), tagged with the service name. An
// unknown level is a [config.Error] of the field "Level".
func New(w io.Writer, level, service string) (zerolog.Logger, error) {
	if level == "" {
		level = DefaultLevel
	}
	lvl, err := zerolog.ParseLevel(strings.ToLower(level))
	if err != nil || lvl == zerolog.NoLevel {
		return zerolog.Nop(), config.Errorf("Level", "unknown level %q (want debug, info, warn or error)", level)
	}
	switch {
	case isTerminal(w):
		w = zerolog.SyncWriter(zerolog.ConsoleWriter{Out: w, TimeFormat: time.TimeOnly})
	default:
		if _, ok := w.(*os.File); !ok {
			// Files take each line in one write(2); other writers may not be
			// safe for the concurrent lines of a fleet.
			w = zerolog.SyncWriter(w)
		}
	}
	return zerolog.New(w).Level(lvl).With().Timestamp().Str("svc", service).Logger(), nil
}

// isTerminal reports whether w is a terminal. /dev/null is a character
// device too, so the device type is not enough: ask the terminal driver.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && isatty.IsTerminal(f.Fd())
}

// IsTerminal reports whether w is a terminal: what the commands ask to
// choose between output for people and output for programs.
func IsTerminal(w io.Writer) bool { return isTerminal(w) }
