package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/toolfleet/toolfleet/internal/coordinator"
	"github.com/toolfleet/toolfleet/internal/logging"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// serveFlags are the flags of "coordinator serve": the fleet flags of run,
// whose limits are ceilings, and the service's own.
type serveFlags struct {
	fleetFlags
	name              string
	maxConcurrentRuns int
	maxRequestBytes   int
	shutdownGrace     time.Duration
	runAckWait        time.Duration
	resultTTL         time.Duration
	storeDir          string
}

func newServeFlagSet(f *serveFlags, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("coordinator serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	f.fleetFlags.register(fs, true)
	fs.StringVar(&f.name, "name", "", "coordinator `ID` in run results and logs (default <hostname>-<pid>)")
	fs.IntVar(&f.maxConcurrentRuns, "max-concurrent-runs", coordinator.DefaultMaxConcurrentRuns, "runs this coordinator runs at once (1..10000)")
	fs.IntVar(&f.maxRequestBytes, "max-request-bytes", protocol.DefaultMaxRunRequestBytes, "size limit of a run request; larger ones are refused (1..1048576)")
	fs.DurationVar(&f.shutdownGrace, "shutdown-grace", coordinator.DefaultShutdownGrace, "on SIGTERM, how long runs in flight have to reach a step boundary and be handed off before they are cancelled")
	fs.DurationVar(&f.runAckWait, "run-ack-wait", coordinator.DefaultRunAckWait, "how long a run taken by a coordinator that died waits before another coordinator takes it (fleet-wide)")
	fs.DurationVar(&f.resultTTL, "result-ttl", coordinator.DefaultResultTTL, "how long results stay in the runs bucket (fleet-wide)")
	fs.StringVar(&f.listen, "listen", "127.0.0.1:0", "with the embedded server, the `HOST:PORT` clients and remote workers connect to (port 0: random), with credentials drawn at start and written to a credentials file whose path is logged; \"none\": in-process connections only")
	fs.StringVar(&f.storeDir, "store-dir", "", "the embedded server's JetStream directory (default: a temporary directory, removed on exit)")
	return fs
}

func (f *serveFlags) serveConfig() coordinator.ServeConfig {
	return coordinator.ServeConfig{
		Name:              f.name,
		MaxConcurrentRuns: f.maxConcurrentRuns,
		MaxRequestBytes:   f.maxRequestBytes,
		ShutdownGrace:     f.shutdownGrace,
		AckWait:           f.runAckWait,
		ResultTTL:         f.resultTTL,
	}
}

// validate checks the service's flags. A zero ServeConfig field means its
// default, so a 0 on the command line is refused rather than silently
// turned into the default.
func (f *serveFlags) validate(set map[string]bool) error {
	if err := f.fleetFlags.validate(set); err != nil {
		return err
	}
	checks := []struct {
		name string
		bad  bool
		rule string
		got  any
	}{
		{"max-concurrent-runs", f.maxConcurrentRuns < 1, "1..10000", f.maxConcurrentRuns},
		{"max-request-bytes", f.maxRequestBytes < 1, "1..1048576", f.maxRequestBytes},
		{"shutdown-grace", f.shutdownGrace <= 0, "> 0", f.shutdownGrace},
		{"run-ack-wait", f.runAckWait <= 0, ">= 100ms", f.runAckWait},
		{"result-ttl", f.resultTTL <= 0, "> 0", f.resultTTL},
	}
	for _, c := range checks {
		if c.bad {
			return &usageError{fmt.Sprintf("--%s must be %s, got %v", c.name, c.rule, c.got)}
		}
	}
	if f.storeDir != "" && f.natsURL != "" {
		return &usageError{"--store-dir is for the embedded server: it cannot be used with --nats-url"}
	}
	if err := f.serveConfig().Validate(); err != nil {
		return &usageError{err.Error()}
	}
	return nil
}

// serveCommand runs "coordinator serve": serve runs until SIGINT or
// SIGTERM, then drain.
func serveCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var f serveFlags
	fs := newServeFlagSet(&f, stderr)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), `usage: coordinator serve [flags]

Serves runs: answers run requests on <prefix>.run.submit, runs up to
--max-concurrent-runs of them at once (sharing the work with every other
serving coordinator), stores each result in the <prefix>_runs bucket under
<client>.<run_id> and announces it on <prefix>.run.result.<client>.<run_id>
(the run id alone without a client). The loop limits
are ceilings: a request may lower them, never raise them.

  nats req fleet.run.submit.<client> '{"prompt": "What is 6 * 7?"}'
  (the shared fleet.run.submit also works where permissions allow it)

Flags:`)
		fs.PrintDefaults()
		fmt.Fprintln(fs.Output(), "\nexit status: 0 stopped by SIGINT or SIGTERM, 2 bad usage or config, 1 other error")
	}
	pos, err := parseInterleaved(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		return exitUsage
	}
	if len(pos) > 0 {
		fmt.Fprintf(stderr, "coordinator serve: takes no arguments, got %q (submit prompts with \"coordinator submit\")\n", pos[0])
		return exitUsage
	}
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	if err := f.validate(set); err != nil {
		fmt.Fprintln(stderr, "coordinator serve:", err)
		return exitUsage
	}
	log, err := logging.New(stderr, f.logLevel, "coordinator")
	if err != nil {
		fmt.Fprintln(stderr, "coordinator serve:", err)
		return exitUsage
	}
	warnCommandLine(log, args)
	model, err := f.newModel(log)
	if err != nil {
		fmt.Fprintln(stderr, "coordinator serve:", err)
		return exitUsage
	}
	cfg := f.config(model, log)
	cfg.StoreDir = f.storeDir
	c, err := coordinator.Open(ctx, cfg)
	if err != nil {
		fmt.Fprintln(stderr, "coordinator serve:", err)
		var ce *loop.ConfigError
		if errors.As(err, &ce) {
			return exitUsage
		}
		return exitError
	}
	defer c.Close()
	sc := f.serveConfig()
	sc.AfterAppend = crashAfter()
	if err := c.Serve(ctx, sc); err != nil {
		fmt.Fprintln(stderr, "coordinator serve:", err)
		return exitError
	}
	return exitOK
}
