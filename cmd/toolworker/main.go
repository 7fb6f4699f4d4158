// Command toolworker serves tools to a toolfleet: it pulls tool calls from
// NATS JetStream, runs them in the sandbox harness and publishes their
// results. Run it with --help for the flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/toolfleet/toolfleet/internal/cliconfig"
	"github.com/toolfleet/toolfleet/internal/logging"
	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/procsec"
	"github.com/toolfleet/toolfleet/internal/toolworker"
	"github.com/toolfleet/toolfleet/internal/tracing"
	"github.com/toolfleet/toolfleet/pkg/config"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// version is the version the worker's discovery service announces (a
// semantic version); release builds set it with
// -ldflags "-X main.version=1.2.3".
var version = natsbus.DefaultServiceVersion

// Exit statuses.
const (
	exitOK     = 0
	exitError  = 1
	exitConfig = 2
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// Credentials stay out of reach of the exec tools: secrets leave the
	// environment (procsec.Getenv still reads them) and the process is not
	// dumpable, so /proc/<pid>/environ, mem and fd are closed to processes
	// of the same uid.
	procsec.Take()
	hardenErr := procsec.Harden()
	code := tracing.Main("toolfleet-toolworker", os.Stderr, func() int { return run(ctx, os.Args[1:], os.Stderr, procsec.Getenv) })
	stop()
	if hardenErr != nil {
		fmt.Fprintln(os.Stderr, "toolworker: could not make the process non-dumpable:", hardenErr)
	}
	os.Exit(code)
}

// run is the whole program; it returns the exit status.
func run(ctx context.Context, args []string, stderr io.Writer, getenv func(string) string) int {
	fs := flag.NewFlagSet("toolworker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		url         = fs.String("nats-url", "", "NATS server URL(s), comma-separated (env NATS_URL; default nats://127.0.0.1:4222)")
		jsDomain    = fs.String("js-domain", "", "JetStream domain of the fleet's streams, for a worker on a leaf node (env NATS_JS_DOMAIN)")
		creds       = fs.String("creds", "", "NATS credentials file (env NATS_CREDS)")
		user        = fs.String("user", "", "NATS user name (env NATS_USER)")
		password    = fs.String("password", "", "NATS password; prefer env NATS_PASSWORD, flags are visible to other users")
		tools       = fs.String("tools", "", "tool manifest `FILE` (JSON)")
		builtin     = fs.String("builtin", "", "comma-separated built-in tools to serve: calculator, echo (default \"calculator,echo\" when --tools is not given)")
		concurrency = fs.Int("concurrency", natsbus.DefaultConcurrency, "calls run at once, all tools together")
		name        = fs.String("name", "", "worker `ID` in results and logs (default <hostname>-<pid>)")
		prefix      = fs.String("prefix", protocol.DefaultPrefix, "first token of every subject")
		logStderr   = fs.Bool("log-stderr", false, "log exec tools' stderr (it may hold secrets)")
		logLevel    = fs.String("log-level", logging.DefaultLevel, "log level: debug, info, warn or error")
		metricsAddr = fs.String("metrics-addr", "", "serve Prometheus /metrics, /healthz and /readyz on this `ADDR` (e.g. :9090; default: off)")
		checkEvery  = fs.Duration("stream-check-interval", natsbus.DefaultStreamCheckInterval, "how often the fleet's stream configuration is checked; the worker takes no calls while it differs (> 0)")
		ackWait     = fs.Duration("ack-wait", natsbus.DefaultAckWait, "how long the server waits for a call's ack or heartbeat before redelivering it to another worker; running idempotent calls heartbeat every third of it (fleet-wide: the last worker to start sets it)")
	)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: toolworker [flags]\n\nServes tools to a toolfleet over NATS JetStream.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitConfig
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "toolworker: unexpected argument %q (flags only; see --help)\n", fs.Arg(0))
		return exitConfig
	}
	log, err := logging.New(stderr, *logLevel, "toolworker")
	if err != nil {
		return configExit(stderr, err)
	}
	if found := procsec.CommandLineSecrets(args); len(found) > 0 {
		log.Warn().Strs("flags", found).
			Msg("a password on the command line is readable by every local user (/proc/<pid>/cmdline): use env NATS_PASSWORD or a credentials file (--creds)")
	}
	if *concurrency < 1 {
		fmt.Fprintf(stderr, "toolworker: --concurrency: must be >= 1, got %d\n", *concurrency)
		return exitConfig
	}
	if *checkEvery <= 0 {
		fmt.Fprintf(stderr, "toolworker: --stream-check-interval: must be > 0, got %v\n", *checkEvery)
		return exitConfig
	}
	builtins := splitList(*builtin)
	if *tools == "" && *builtin == "" {
		builtins = []string{"calculator", "echo"}
	}

	cfg := toolworker.Config{
		Conn: natsbus.ConnConfig{
			URL:       *url,
			CredsFile: *creds,
			User:      *user,
			Password:  *password,
			JSDomain:  *jsDomain,
			Getenv:    getenv,
		},
		Prefix:              *prefix,
		ToolsFile:           *tools,
		Builtins:            builtins,
		LogStderr:           *logStderr,
		MetricsAddr:         *metricsAddr,
		StreamCheckInterval: *checkEvery,
		Worker:              natsbus.WorkerConfig{Name: *name, Concurrency: *concurrency, AckWait: *ackWait, Version: version},
		Logger:              log,
	}
	err = toolworker.Run(ctx, cfg)
	if config.Errors(err) != nil {
		return configExit(stderr, err)
	}
	switch {
	case err == nil:
		return exitOK
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
		return exitOK // stopped by a signal before serving
	default:
		log.Error().Err(err).Msg("toolworker stopped")
		return exitError
	}
}

// configExit prints each configuration error of err with the flag that
// sets its field and returns exit status 2.
func configExit(stderr io.Writer, err error) int {
	for _, m := range flagOf.Describe(err) {
		fmt.Fprintf(stderr, "toolworker: %s\n", m)
	}
	return exitConfig
}

// flagOf maps the fields of toolworker.Config to the flags (or environment
// variables) that set them.
var flagOf = cliconfig.Conn.With(cliconfig.Flags{
	"ToolsFile":           "--tools",
	"Builtins":            "--builtin",
	"LogStderr":           "--log-stderr",
	"MetricsAddr":         "--metrics-addr",
	"StreamCheckInterval": "--stream-check-interval",
	"Worker.Name":         "--name",
	"Worker.Concurrency":  "--concurrency",
	"Worker.AckWait":      "--ack-wait",
	"Worker.Heartbeat":    "--ack-wait",
	"Worker.Version":      "-ldflags -X main.version",
})

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
