package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/internal/coordinator"
	"github.com/toolfleet/toolfleet/internal/logging"
	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/procsec"
	"github.com/toolfleet/toolfleet/pkg/agent"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// demoPrompt is the prompt of a run without one: the demo model evaluates
// two expressions in parallel, then their sum.
const demoPrompt = "What is (17 + 25) * 3, what is 2 ** 10, and what is their sum?"

// connFlags say how to reach the fleet: shared by every subcommand that
// connects.
type connFlags struct {
	natsURL, creds, user, password, prefix string
	jsDomain                               string
}

func (f *connFlags) register(fs *flag.FlagSet, embedded bool) {
	urlHelp := "NATS server URL (env NATS_URL); default nats://127.0.0.1:4222"
	if embedded {
		urlHelp = "NATS server URL (env NATS_URL); empty: start an embedded JetStream server"
	}
	fs.StringVar(&f.natsURL, "nats-url", os.Getenv("NATS_URL"), urlHelp)
	fs.StringVar(&f.creds, "creds", "", "NATS credentials file (env NATS_CREDS)")
	fs.StringVar(&f.user, "user", "", "NATS user (env NATS_USER)")
	fs.StringVar(&f.password, "password", "", "NATS password (env NATS_PASSWORD)")
	fs.StringVar(&f.prefix, "prefix", protocol.DefaultPrefix, "first token of every subject")
	fs.StringVar(&f.jsDomain, "js-domain", "", "JetStream domain of the fleet's streams, for a process on a leaf node (env NATS_JS_DOMAIN)")
}

func (f *connFlags) conn() natsbus.ConnConfig {
	return natsbus.ConnConfig{URL: f.natsURL, CredsFile: f.creds, User: f.user, Password: f.password, JSDomain: f.jsDomain, Getenv: procsec.Getenv}
}

// fleetFlags are the flags "coordinator run" and "coordinator serve" share:
// connection, in-process workers, tools, model, loop limits, approval and
// logging.
type fleetFlags struct {
	connFlags
	workers         int
	tools, builtins string
	modelFlags
	maxRounds, maxCalls, maxObsChars int
	maxKept, maxTranscriptBytes      int
	maxRunDuration                   time.Duration
	toolTimeout, approvalTimeout     time.Duration
	requireApproval                  string
	dryRun                           bool
	traceArgs                        bool
	logLevel                         string
	metricsAddr                      string
	streamCheckInterval              time.Duration
	observer                         loop.Observer // the terminal's display, if any
	listen                           string
	storeDir                         string // serve only
	// agent and summarizer are set by agentModel (run --agent FILE).
	agent      *agent.Definition
	summarizer loop.Model
}

// register defines the flags on fs. With ceilings, the loop limits are
// described as the ceilings that requests may lower.
func (f *fleetFlags) register(fs *flag.FlagSet, ceilings bool) {
	f.connFlags.register(fs, true)
	limit := func(help string) string {
		if ceilings {
			return help + "; the ceiling a run request may lower"
		}
		return help
	}
	fs.IntVar(&f.workers, "workers", 0, "in-process toolworkers (0: 1 with the embedded server, none with --nats-url)")
	fs.StringVar(&f.tools, "tools", "", "tool manifest for in-process workers")
	fs.StringVar(&f.builtins, "builtin", "", "built-in tools for in-process workers (default calculator,echo when --tools is empty)")
	f.modelFlags.register(fs)
	fs.IntVar(&f.maxRounds, "max-rounds", loop.DefaultMaxRounds, limit("model rounds before giving up (>= 1)"))
	fs.IntVar(&f.maxCalls, "max-tool-calls-per-round", loop.DefaultMaxToolCallsPerRound, limit("tool calls executed per round; the rest are rejected (>= 1)"))
	fs.IntVar(&f.maxObsChars, "max-observation-chars", loop.DefaultMaxObservationChars, limit("bound on each observation, in characters (>= 1)"))
	fs.IntVar(&f.maxKept, "max-tool-calls-kept", 0, "hard ceiling on the calls of one model response kept in the transcript; the rest are dropped (> --max-tool-calls-per-round; default max(128, per-round+1))")
	fs.IntVar(&f.maxTranscriptBytes, "max-transcript-bytes", loop.DefaultMaxTranscriptBytes, "bound on a run's transcript, in bytes; a run past it ends with an error (>= 1)")
	fs.DurationVar(&f.maxRunDuration, "max-run-duration", loop.DefaultMaxRunDuration, "wall-clock budget of one run; past it the run ends with an error, every open call answered (> 0)")
	fs.DurationVar(&f.toolTimeout, "tool-timeout", 0, limit("override every tool's own timeout (> 0)"))
	fs.StringVar(&f.requireApproval, "require-approval", "", "tools that need a human's approval: comma list, or * (tools declaring requires_approval always do)")
	fs.DurationVar(&f.approvalTimeout, "approval-timeout", loop.DefaultApprovalTimeout, "how long to wait for an approval before the call expires (> 0)")
	fs.BoolVar(&f.dryRun, "dry-run", false, "dry runs: only tools declared read-only run; every other call is gated as usual and answered simulated")
	fs.BoolVar(&f.traceArgs, "trace-args", false, "log argument values and add them to trace spans (default: keys only)")
	fs.StringVar(&f.logLevel, "log-level", logging.DefaultLevel, "debug | info | warn | error")
	fs.StringVar(&f.metricsAddr, "metrics-addr", "", "serve Prometheus /metrics, /healthz and /readyz on this `ADDR` (e.g. :9090; default: off)")
	fs.DurationVar(&f.streamCheckInterval, "stream-check-interval", natsbus.DefaultStreamCheckInterval, "how often the fleet's stream configuration is checked; the coordinator stops serving while it differs (> 0)")
}

// runFlags are the flags of "coordinator run".
type runFlags struct {
	fleetFlags
	output    string
	agentFile string
}

func newRunFlagSet(f *runFlags, stderr io.Writer) *flag.FlagSet {
	fs := newFlagSet("coordinator run", stderr)
	f.fleetFlags.register(fs, false)
	fs.StringVar(&f.output, "output", "text", "text | json")
	fs.StringVar(&f.agentFile, "agent", "", "run as the agent this definition `FILE` describes (docs/agents.md): its instructions, model, tools, limits and budget")
	fs.StringVar(&f.listen, "listen", "", "with the embedded server, also listen on this `HOST:PORT` (port 0: random) with the users of deploy/nats-server.conf: client and worker (passwords from TOOLFLEET_CLIENT_PASSWORD, TOOLFLEET_WORKER_PASSWORD, else drawn and written to nats.env and worker.env, paths logged) operator (only with TOOLFLEET_OPERATOR_PASSWORD) and viewer (only with TOOLFLEET_VIEWER_PASSWORD) (default: in-process connections only)")
	return fs
}

// parseInterleaved parses flags that may stand before or after positional
// arguments, and returns the positional ones.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// usageError is a bad flag value: exit status 2 with its message.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

// validate checks the fleet flags: the libraries validate the
// configuration they describe (coordinator.Config.Validate, before anything
// starts), and refuse a negative limit; a limit given as 0 is refused here.
func (f *fleetFlags) validate(fs *flag.FlagSet, set map[string]bool) error {
	if err := refuseZero(fs, set, "max-rounds", "max-tool-calls-per-round", "max-observation-chars",
		"max-tool-calls-kept", "max-transcript-bytes", "max-run-duration", "tool-timeout",
		"approval-timeout", "stream-check-interval"); err != nil {
		return err
	}
	if f.listen == "none" || (f.natsURL != "" && !set["listen"]) {
		f.listen = ""
	}
	return f.config(nil, zerolog.Nop()).Validate()
}

func (f *runFlags) validate(fs *flag.FlagSet, set map[string]bool) error {
	if err := f.fleetFlags.validate(fs, set); err != nil {
		return err
	}
	return checkOutput(f.output)
}

func checkOutput(output string) error {
	if output != "text" && output != "json" {
		return &usageError{fmt.Sprintf("--output must be text or json, got %q", output)}
	}
	return nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func runCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var f runFlags
	fs := newRunFlagSet(&f, stderr)
	cmd := &command{name: "coordinator run", fs: fs, flags: fleetFlagOf, stderr: stderr,
		usage: "[flags] PROMPT",
		exits: exitsRun}
	pos, set, code, done := cmd.parse(args, anyArgs)
	if done {
		return code
	}
	prompt := strings.Join(pos, " ")
	noPrompt := prompt == ""
	validate := func() error {
		if err := f.validate(fs, set); err != nil {
			return err
		}
		if noPrompt && f.model != "" {
			return &usageError{"a PROMPT is required with --model"}
		}
		return nil
	}
	if noPrompt {
		prompt = demoPrompt
	}
	newModel := f.newModel
	if f.agentFile != "" {
		newModel = f.agentModel(f.agentFile)
	}
	var c *coordinator.Coordinator
	display := f.terminal(stdout, set, func() *coordinator.Coordinator { return c })
	if display != nil {
		defer display.Close()
		ctx = loop.WithProgress(loop.WithStartedNotices(ctx), display.Progress)
	}
	return f.withCoordinator(ctx, cmd, args, validate, newModel, func(opened *coordinator.Coordinator, _ zerolog.Logger) int {
		c = opened // for the display
		var res *loop.Result
		var runErr error
		if c.Journaling() {
			res, runErr = c.RunJournaled(ctx, prompt)
		} else {
			res, runErr = c.Run(ctx, prompt)
		}
		if display != nil {
			display.Close()
		}
		return finishRun(stdout, stderr, "coordinator run", f.output, res, runErr)
	})
}

// anyArgs takes any positional arguments.
func anyArgs([]string) string { return "" }

// finishRun prints a run's result and returns the exit status.
func finishRun(stdout, stderr io.Writer, cmd, output string, res *loop.Result, runErr error) int {
	if res != nil {
		if err := printResult(stdout, output, res); err != nil {
			fmt.Fprintln(stderr, cmd+": writing the result:", err)
			return exitError
		}
	}
	switch {
	case runErr != nil:
		fmt.Fprintln(stderr, cmd+":", runErr)
		return exitError
	case res.TerminationReason == loop.TerminationMaxRounds:
		return exitMaxRounds
	case res.TerminationReason != loop.TerminationNatural:
		return exitError
	}
	return exitOK
}

// config is the coordinator configuration the flags describe.
func (f *fleetFlags) config(model loop.Model, log zerolog.Logger) coordinator.Config {
	c := coordinator.Config{
		Conn:      f.conn(),
		Prefix:    f.prefix,
		Workers:   f.workers,
		ToolsFile: f.tools,
		Builtins:  splitList(f.builtins),
		Model:     model,
		Loop: loop.Config{
			MaxRounds:            f.maxRounds,
			MaxToolCallsPerRound: f.maxCalls,
			MaxObservationChars:  f.maxObsChars,
			MaxToolCallsKept:     f.maxKept,
			MaxTranscriptBytes:   f.maxTranscriptBytes,
			MaxRunDuration:       f.maxRunDuration,
			ToolTimeout:          f.toolTimeout,
			ApprovalTimeout:      f.approvalTimeout,
			RequireApproval:      splitList(f.requireApproval),
			DryRun:               f.dryRun,
			TraceArgs:            f.traceArgs,
			Observer:             f.observer,
		},
		MetricsAddr:         f.metricsAddr,
		StreamCheckInterval: f.streamCheckInterval,
		Listen:              f.listen,
		StoreDir:            f.storeDir,
		Logger:              log,
		Agent:               f.agent,
	}
	if f.summarizer != nil {
		c.Loop.Summarizer = f.summarizer
	}
	return c
}

// open checks the flags with validate, makes the logger and the model (with
// newModel) and opens the coordinator the flags describe. When done is set
// the command returns code: the error is printed.
func (f *fleetFlags) open(ctx context.Context, cmd *command, args []string, validate func() error, newModel func(zerolog.Logger) (loop.Model, error)) (_ *coordinator.Coordinator, _ zerolog.Logger, code int, done bool) {
	if err := validate(); err != nil {
		return nil, zerolog.Nop(), cmd.fail(err), true
	}
	log, err := logging.New(cmd.stderr, f.logLevel, "coordinator")
	if err != nil {
		return nil, log, cmd.fail(err), true
	}
	warnCommandLine(log, args)
	model, err := newModel(log)
	if err != nil {
		return nil, log, cmd.fail(err), true
	}
	c, err := coordinator.Open(ctx, f.config(model, log))
	if err != nil {
		return nil, log, cmd.fail(err), true
	}
	return c, log, exitOK, false
}

// withCoordinator opens the coordinator the flags describe as open does,
// runs do with it and its logger, and closes it: the way a command that
// runs on a coordinator to its end reaches one (console, which opens one
// only without --nats-url, calls open). The exit status is do's, or that
// of the step of open that failed.
func (f *fleetFlags) withCoordinator(ctx context.Context, cmd *command, args []string, validate func() error, newModel func(zerolog.Logger) (loop.Model, error),
	do func(*coordinator.Coordinator, zerolog.Logger) int) int {
	c, log, code, done := f.open(ctx, cmd, args, validate, newModel)
	if done {
		return code
	}
	defer c.Close()
	return do(c, log)
}

func printResult(w io.Writer, format string, res *loop.Result) error {
	if format == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	return writeTranscript(w, res)
}
