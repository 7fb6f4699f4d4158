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
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/internal/cliconfig"
	"github.com/toolfleet/toolfleet/internal/logging"
	"github.com/toolfleet/toolfleet/internal/metrics"
	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/procsec"
	"github.com/toolfleet/toolfleet/internal/toolworker"
	"github.com/toolfleet/toolfleet/internal/tracing/tracingsdk"
	"github.com/toolfleet/toolfleet/pkg/config"
	"github.com/toolfleet/toolfleet/pkg/protocol"
	"github.com/toolfleet/toolfleet/pkg/worker"
)

// version is the version the worker's discovery service announces (a
// semantic version); release builds set it with
// -ldflags "-X main.version=1.2.3".
var version = worker.DefaultVersion

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
	code := tracingsdk.Main("toolfleet-toolworker", os.Stderr, func() int { return run(ctx, os.Args[1:], os.Stderr, procsec.Getenv) })
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
		concurrency = fs.Int("concurrency", worker.DefaultConcurrency, "calls run at once, all tools together")
		name        = fs.String("name", "", "worker `ID` in results and logs (default <hostname>-<pid>)")
		prefix      = fs.String("prefix", protocol.DefaultPrefix, "first token of every subject")
		logStderr   = fs.Bool("log-stderr", false, "log exec tools' stderr (it may hold secrets)")
		logLevel    = fs.String("log-level", logging.DefaultLevel, "log level: debug, info, warn or error")
		metricsAddr = fs.String("metrics-addr", "", "serve Prometheus /metrics, /healthz and /readyz on this `ADDR` (e.g. :9090; default: off)")
		checkEvery  = fs.Duration("stream-check-interval", worker.DefaultStreamCheckInterval, "how often the fleet's stream configuration is checked; the worker takes no calls while it differs (> 0)")
		ackWait     = fs.Duration("ack-wait", worker.DefaultAckWait, "how long the server waits for a call's ack or heartbeat before redelivering it to another worker; running idempotent calls heartbeat every third of it (fleet-wide: the last worker to start sets it)")
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

	conn := natsbus.ConnConfig{
		URL:       *url,
		CredsFile: *creds,
		User:      *user,
		Password:  *password,
		JSDomain:  *jsDomain,
		Getenv:    getenv,
	}
	cfg, err := workerConfig(conn, *tools, builtins, log)
	if err != nil {
		return configExit(stderr, err)
	}
	cfg.Prefix = *prefix
	cfg.Name = *name
	cfg.Version = version
	cfg.Concurrency = *concurrency
	cfg.AckWait = *ackWait
	cfg.LogStderr = *logStderr
	cfg.StreamCheckInterval = *checkEvery
	err = serve(ctx, conn, cfg, *metricsAddr)
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

// workerConfig is the worker configuration of the tools a manifest (path,
// when set) and builtins describe, on the fleet conn reaches.
func workerConfig(conn natsbus.ConnConfig, path string, builtins []string, log zerolog.Logger) (worker.Config, error) {
	return toolworker.Load(worker.Config{JSDomain: conn.Domain(), Logger: log}, path, builtins, conn.Getenv)
}

// serve checks cfg and the connection settings (configuration errors come
// before any connection attempt), serves the metrics when metricsAddr is
// set, connects and runs the worker (pkg/worker) until ctx ends.
func serve(ctx context.Context, conn natsbus.ConnConfig, cfg worker.Config, metricsAddr string) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if err := conn.Validate(); err != nil {
		return asConfigError("Conn", err)
	}
	var (
		connected atomic.Pointer[nats.Conn]
		serving   atomic.Pointer[worker.Worker]
	)
	if metricsAddr != "" {
		reg := metrics.NewRegistry()
		cfg.Metrics = reg
		metrics.RegisterConn(reg, func() bool {
			nc := connected.Load()
			return nc != nil && nc.IsConnected()
		})
		srv, err := metrics.Listen(metrics.ServerConfig{
			Addr:     metricsAddr,
			Gatherer: reg,
			Healthy: func(ctx context.Context) error {
				if w := serving.Load(); w != nil {
					return w.Healthy(ctx)
				}
				return errConnecting
			},
			Ready: func(ctx context.Context) error {
				if w := serving.Load(); w != nil {
					return w.Ready(ctx)
				}
				return errConnecting
			},
			Logger: cfg.Logger,
		})
		if err != nil {
			return &config.FieldError{Field: "MetricsAddr", Err: err}
		}
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
			defer cancel()
			srv.Close(sctx)
		}()
	}
	conn.Name = "toolfleet-toolworker"
	if cfg.Name != "" {
		conn.Name += "-" + cfg.Name
	}
	conn.Logger = cfg.Logger
	nc, err := natsbus.Connect(ctx, conn)
	if err != nil {
		if ce := asConfigError("Conn", err); ce != err {
			return ce
		}
		return fmt.Errorf("toolworker: %w", err)
	}
	defer nc.Close()
	connected.Store(nc)
	w, err := worker.New(nc, cfg)
	if err != nil {
		return err
	}
	serving.Store(w)
	err = w.Run(ctx)
	// Acks are buffered core publishes: send them before closing, but do
	// not hold the shutdown for a server that cannot be reached (Flush
	// alone waits 10s for it).
	if nc.IsConnected() {
		nc.FlushTimeout(closeTimeout)
	}
	return err
}

// closeTimeout bounds the flush of the last acks and the metrics server's
// shutdown.
const closeTimeout = 2 * time.Second

// errConnecting is the health of a worker that has no connection yet.
var errConnecting = errors.New("connecting to NATS")

// asConfigError turns a configuration error of the settings at field path
// prefix into a [config.Error] naming the field; other errors are returned
// as they are.
func asConfigError(prefix string, err error) error {
	var ce config.Error
	if !errors.As(err, &ce) {
		return err
	}
	return config.Prefix(prefix, ce)
}

// configExit prints each configuration error of err with the flag that
// sets its field and returns exit status 2.
func configExit(stderr io.Writer, err error) int {
	for _, ce := range config.Errors(err) {
		field := ce.ConfigField()
		if strings.HasPrefix(field, "Tools[") {
			field = "Tools" // a tool of --tools or --builtin
		}
		fmt.Fprintf(stderr, "toolworker: %s: %s\n", flagOf.Flag(field), ce.ConfigProblem())
	}
	return exitConfig
}

// flagOf maps the fields of worker.Config (and ToolsFile, Builtins,
// MetricsAddr: this command's own) to the flags (or environment variables)
// that set them.
var flagOf = cliconfig.Conn.With(cliconfig.Flags{
	"ToolsFile":           "--tools",
	"Builtins":            "--builtin",
	"Tools":               "--tools/--builtin",
	"MCPServers":          "--tools",
	"JSDomain":            "--js-domain",
	"LogStderr":           "--log-stderr",
	"MetricsAddr":         "--metrics-addr",
	"StreamCheckInterval": "--stream-check-interval",
	"Name":                "--name",
	"Concurrency":         "--concurrency",
	"AckWait":             "--ack-wait",
	"Heartbeat":           "--ack-wait",
	"Version":             "-ldflags -X main.version",
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
