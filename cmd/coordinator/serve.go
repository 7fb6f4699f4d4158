package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/internal/coordinator"
	"github.com/toolfleet/toolfleet/pkg/protocol"
	"github.com/toolfleet/toolfleet/pkg/serve"
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
	noCallStarts      bool
}

func newServeFlagSet(f *serveFlags, stderr io.Writer) *flag.FlagSet {
	fs := newFlagSet("coordinator serve", stderr)
	f.fleetFlags.register(fs, true)
	fs.StringVar(&f.name, "name", "", "coordinator `ID` in run results and logs (default <hostname>-<pid>)")
	fs.IntVar(&f.maxConcurrentRuns, "max-concurrent-runs", serve.DefaultMaxConcurrentRuns, "runs this coordinator runs at once (1..10000)")
	fs.IntVar(&f.maxRequestBytes, "max-request-bytes", protocol.DefaultMaxRunRequestBytes, "size limit of a run request; larger ones are refused (1..1048576)")
	fs.DurationVar(&f.shutdownGrace, "shutdown-grace", serve.DefaultShutdownGrace, "on SIGTERM, how long runs in flight have to reach a step boundary and be handed off before they are cancelled")
	fs.DurationVar(&f.runAckWait, "run-ack-wait", serve.DefaultRunAckWait, "how long a run taken by a coordinator that died waits before another coordinator takes it (fleet-wide)")
	fs.DurationVar(&f.resultTTL, "result-ttl", serve.DefaultResultTTL, "how long results stay in the runs bucket (fleet-wide)")
	fs.BoolVar(&f.noCallStarts, "no-call-starts", false, "ask no call for a started notice it does not need: a run's client and the console then learn of a call's start only from its answer (saves one core NATS message per call)")
	fs.StringVar(&f.listen, "listen", "127.0.0.1:0", "with the embedded server, the `HOST:PORT` clients and remote workers connect to (port 0: random), with the users of deploy/nats-server.conf: client and worker (passwords from TOOLFLEET_CLIENT_PASSWORD, TOOLFLEET_WORKER_PASSWORD, else drawn and written to nats.env and worker.env, paths logged) operator (only with TOOLFLEET_OPERATOR_PASSWORD) and viewer (only with TOOLFLEET_VIEWER_PASSWORD); \"none\": in-process connections only")
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
		NoCallStarts:      f.noCallStarts,
	}
}

// validate checks the service's flags: the fleet flags, then the service
// configuration (coordinator.ServeConfig.Validate). A zero ServeConfig
// field means its default, so a 0 on the command line is refused rather
// than silently turned into the default.
func (f *serveFlags) validate(fs *flag.FlagSet, set map[string]bool) error {
	if err := f.fleetFlags.validate(fs, set); err != nil {
		return err
	}
	if err := refuseZero(fs, set, "max-concurrent-runs", "max-request-bytes", "shutdown-grace", "run-ack-wait", "result-ttl"); err != nil {
		return err
	}
	return f.serveConfig().Validate()
}

// serveCommand runs "coordinator serve": serve runs until SIGINT or
// SIGTERM, then drain.
func serveCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var f serveFlags
	fs := newServeFlagSet(&f, stderr)
	cmd := &command{name: "coordinator serve", fs: fs, flags: serveFlagOf, stderr: stderr,
		usage: `[flags]

Serves runs: takes the runs clients store in the runs stream on
<prefix>.run.submit.<client>.<agent>.<submission_id>, runs up to
--max-concurrent-runs of them at once (sharing the work with every other
serving coordinator), each as its agent (docs/agents.md), stores each result
in the <prefix>_runs bucket under <client>.<run_id> and announces it on
<prefix>.run.result.<client>.<run_id>. It answers no request: the server's
acknowledgement of the stored submission is its acceptance. The loop limits
are ceilings: a request may lower them, never raise them.

  coordinator submit --wait "What is 6 * 7?"
  nats req fleet.run.submit.<client>.default.<submission_id> '{"prompt": "What is 6 * 7?"}' \
    -H Nats-Msg-Id:submit-<length of client>-<client>-<submission_id> -H Fleet-Agent:default

Flags:`,
		exits: exitsServe}
	_, set, code, done := cmd.parse(args, func(pos []string) string {
		if len(pos) > 0 {
			return fmt.Sprintf("takes no arguments, got %q (submit prompts with \"coordinator submit\")", pos[0])
		}
		return ""
	})
	if done {
		return code
	}
	return f.withCoordinator(ctx, cmd, args, func() error { return f.validate(fs, set) }, crashWhenAsked(f.newModel), func(c *coordinator.Coordinator, _ zerolog.Logger) int {
		sc := f.serveConfig()
		sc.AfterAppend = crashAfter()
		if err := c.Serve(ctx, sc); err != nil {
			return cmd.fail(err)
		}
		return exitOK
	})
}
