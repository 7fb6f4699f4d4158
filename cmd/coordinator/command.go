package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/toolfleet/toolfleet/internal/cliconfig"
	"github.com/toolfleet/toolfleet/pkg/config"
)

// command is what every subcommand's start shares: its name in messages,
// its flags, its usage and the table that names the flag of each
// configuration field the libraries may refuse.
type command struct {
	name   string
	fs     *flag.FlagSet
	flags  cliconfig.Flags
	stderr io.Writer
	// usage follows "usage: <name> " in the usage: the synopsis, and a
	// description after a blank line. The flags come after it.
	usage string
	// exits, when set, ends the usage: what each exit status means.
	exits string
}

// printUsage prints the usage: for --help and a bad flag.
func (c *command) printUsage() {
	w := c.fs.Output()
	fmt.Fprintln(w, "usage: "+c.name+" "+c.usage)
	c.fs.PrintDefaults()
	if c.exits != "" {
		fmt.Fprintln(w, "\nexit status: "+c.exits)
	}
}

// newFlagSet returns the flag set of the command name: its errors are
// returned, and printed with the usage on stderr.
func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// parse parses args (flags may stand after positional arguments) and
// returns the positional arguments and the names of the flags given. When
// done is set the command returns code at once: 0 for --help, 2 for a bad
// flag or when checkPos (nil: no positional arguments) refuses the
// positional arguments with a message.
func (c *command) parse(args []string, checkPos func([]string) string) (pos []string, set map[string]bool, code int, done bool) {
	c.fs.Usage = c.printUsage
	pos, err := parseInterleaved(c.fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return nil, nil, exitOK, true
	}
	if err != nil {
		return nil, nil, exitUsage, true
	}
	if checkPos == nil {
		checkPos = noArgs
	}
	if msg := checkPos(pos); msg != "" {
		fmt.Fprintf(c.stderr, "%s: %s\n", c.name, msg)
		return nil, nil, exitUsage, true
	}
	set = map[string]bool{}
	c.fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	return pos, set, exitOK, false
}

// noArgs refuses any positional argument.
func noArgs(pos []string) string {
	if len(pos) > 0 {
		return fmt.Sprintf("takes no arguments, got %q", pos[0])
	}
	return ""
}

// fail prints err and returns the exit status: 2 for a usage error or a
// configuration error (each line naming the flag that sets the field), 1
// for any other.
func (c *command) fail(err error) int {
	var ue *usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(c.stderr, "%s: %v\n", c.name, ue)
		return exitUsage
	}
	if msgs := c.flags.Describe(err); msgs != nil {
		for _, m := range msgs {
			fmt.Fprintf(c.stderr, "%s: %s\n", c.name, m)
		}
		return exitUsage
	}
	fmt.Fprintf(c.stderr, "%s: %v\n", c.name, err)
	return exitError
}

// refuseZero returns a usage error for the first of names given as zero
// on the command line: the libraries read a zero as "the default", so a 0
// typed by hand is refused rather than silently turned into the default.
func refuseZero(fs *flag.FlagSet, set map[string]bool, names ...string) error {
	for _, n := range names {
		fl := fs.Lookup(n)
		if fl == nil || !set[n] {
			continue
		}
		switch v := fl.Value.(flag.Getter).Get().(type) {
		case int:
			if v == 0 {
				return &usageError{fmt.Sprintf("--%s must not be 0", n)}
			}
		case time.Duration:
			if v == 0 {
				return &usageError{fmt.Sprintf("--%s must not be 0", n)}
			}
		}
	}
	return nil
}

// nest returns err with the field of its configuration error under prefix
// (the field of the configuration that holds the one that failed), or err
// itself when it holds none.
func nest(prefix string, err error) error {
	var ce config.Error
	if errors.As(err, &ce) {
		return config.Prefix(prefix, ce)
	}
	return err
}

// connFlagOf names the flags of the connection settings.
var connFlagOf = cliconfig.Conn

// fleetFlagOf names the flags of coordinator.Config's fields: "coordinator
// run" and "coordinator resume".
var fleetFlagOf = connFlagOf.With(cliconfig.Flags{
	"Workers":                   "--workers",
	"ToolsFile":                 "--tools",
	"Builtins":                  "--builtin",
	"Model":                     "--model",
	"Model.BaseURL":             "--model-base-url",
	"Model.APIKey":              "env OPENAI_API_KEY or ANTHROPIC_API_KEY",
	"Model.Temperature":         "--temperature",
	"Model.MaxTokens":           "--max-tokens",
	"Model.MaxOutputTokens":     "--max-tokens",
	"Loop.MaxRounds":            "--max-rounds",
	"Loop.MaxToolCallsPerRound": "--max-tool-calls-per-round",
	"Loop.MaxObservationChars":  "--max-observation-chars",
	"Loop.MaxToolCallsKept":     "--max-tool-calls-kept",
	"Loop.MaxTranscriptBytes":   "--max-transcript-bytes",
	"Loop.MaxRunDuration":       "--max-run-duration",
	"Loop.ToolTimeout":          "--tool-timeout",
	"Loop.ApprovalTimeout":      "--approval-timeout",
	"Loop.RequireApproval":      "--require-approval",
	"MetricsAddr":               "--metrics-addr",
	"StreamCheckInterval":       "--stream-check-interval",
	"Listen":                    "--listen",
	"StoreDir":                  "--store-dir",
})

// serveFlagOf adds the flags of coordinator.ServeConfig's fields.
var serveFlagOf = fleetFlagOf.With(cliconfig.Flags{
	"Name":              "--name",
	"MaxConcurrentRuns": "--max-concurrent-runs",
	"MaxRequestBytes":   "--max-request-bytes",
	"ShutdownGrace":     "--shutdown-grace",
	"AckWait":           "--run-ack-wait",
	"ResultTTL":         "--result-ttl",
})
