package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/internal/console"
	"github.com/toolfleet/toolfleet/internal/httpapi"
	"github.com/toolfleet/toolfleet/internal/logging"
	"github.com/toolfleet/toolfleet/internal/natsbus"
)

// consoleFlags are the flags of "coordinator console": those of serve
// (for the embedded fleet it starts without --nats-url) and the HTTP
// API's own.
type consoleFlags struct {
	serveFlags
	addr          string
	secureCookies bool
	idleTimeout   time.Duration
	maxStreams    int
}

// consoleFlagOf names the flags of httpapi.Config's fields.
var consoleFlagOf = serveFlagOf.With(map[string]string{
	"IdleTimeout": "--session-idle-timeout",
	"MaxStreams":  "--max-streams",
	"Prefix":      "--prefix",
	"Domain":      "--js-domain",
})

// consoleShutdownGrace bounds how long requests in flight have to finish
// after SIGTERM; event streams are cut at once.
const consoleShutdownGrace = 5 * time.Second

func (f *consoleFlags) apiConfig(dial httpapi.Dialer, log zerolog.Logger) httpapi.Config {
	return httpapi.Config{Dial: dial, Prefix: f.prefix, Domain: f.jsDomain, SecureCookies: f.secureCookies,
		IdleTimeout: f.idleTimeout, MaxStreams: f.maxStreams, Logger: log}
}

// consoleCommand runs "coordinator console": the fleet's HTTP API, until
// SIGINT or SIGTERM.
func consoleCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var f consoleFlags
	fs := newServeFlagSet(&f.serveFlags, stderr)
	fs.Init("coordinator console", flag.ContinueOnError)
	fs.StringVar(&f.addr, "addr", "127.0.0.1:8090", "serve the HTTP API on this `HOST:PORT` (port 0: random)")
	fs.BoolVar(&f.secureCookies, "secure-cookies", false, "mark the session cookie Secure: behind a proxy that terminates TLS (over TLS it always is)")
	fs.DurationVar(&f.idleTimeout, "session-idle-timeout", httpapi.DefaultIdleTimeout, "close a session (and its NATS connection) unused this long")
	fs.IntVar(&f.maxStreams, "max-streams", httpapi.DefaultMaxStreams, "event streams open at once; more are refused (503)")
	cmd := &command{name: "coordinator console", fs: fs, flags: consoleFlagOf, stderr: stderr,
		usage: `[--addr HOST:PORT] [flags]

Serves the fleet's web console (docs/console.md) at / and its HTTP API
(docs/api.md) under /v1/: runs, their events, approvals, tools and
agents, as JSON, with its OpenAPI document at /v1/openapi.json.
Each person logs in (POST /v1/session) or each program sends
Authorization: Basic with a NATS user and password; every request acts on
NATS as that user, so the NATS server's permissions decide what it may do.

With --nats-url the console serves the API on that NATS server, where
coordinators and workers run on their own; it has no NATS identity of its
own. Without it, it starts the embedded fleet "coordinator serve" starts
(its flags apply) and serves the API on it.

  coordinator console --nats-url nats://127.0.0.1:4222 --addr 127.0.0.1:8090

Flags:`,
		exits: exitsServe}
	_, set, code, done := cmd.parse(args, nil)
	if done {
		return code
	}
	if err := refuseZero(fs, set, "session-idle-timeout", "max-streams"); err != nil {
		return cmd.fail(err)
	}
	ln, err := net.Listen("tcp", f.addr)
	if err != nil {
		return cmd.fail(&usageError{fmt.Sprintf("--addr %s: %v", f.addr, err)})
	}
	defer ln.Close()

	var log zerolog.Logger
	natsURL := f.natsURL
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	served := make(chan error, 1) // the HTTP server's end
	var runsDone chan error       // the embedded fleet's serving coordinator's (nil: none)
	if natsURL == "" {
		c, l, code, done := f.open(ctx, cmd, args, func() error { return f.validate(fs, set) }, f.newModel)
		if done {
			return code
		}
		defer c.Close()
		log = l
		if natsURL = c.ClientURL(); natsURL == "" {
			return cmd.fail(&usageError{"--listen none: the console needs the embedded server's listener"})
		}
		sc := f.serveConfig()
		runsDone = make(chan error, 1)
		go func() { runsDone <- c.Serve(ctx, sc) }()
	} else {
		if log, err = logging.New(stderr, f.logLevel, "coordinator"); err != nil {
			return cmd.fail(err)
		}
		warnCommandLine(log, args)
	}
	conn := natsbus.ConnConfig{URL: natsURL, JSDomain: f.jsDomain, Logger: log}
	api, err := httpapi.New(f.apiConfig(httpapi.NATSDialer(conn), log))
	if err != nil {
		return cmd.fail(err)
	}
	defer api.Close()
	web, err := console.New(api)
	if err != nil {
		return cmd.fail(err)
	}
	// No ReadTimeout or WriteTimeout: event streams are long; the API
	// bounds the reading of each other request, and each write of a
	// stream, itself.
	srv := &http.Server{Handler: web, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10,
		BaseContext: func(net.Listener) context.Context { return ctx }}
	go func() { served <- srv.Serve(ln) }()
	log.Info().Str("addr", ln.Addr().String()).Str("openapi", "http://"+ln.Addr().String()+"/v1/openapi.json").
		Msg("serving the HTTP API")
	var serveErr, runsErr error
	runsEnded := false
	select {
	case <-ctx.Done():
	case serveErr = <-served:
	case runsErr = <-runsDone:
		runsEnded = true
	}
	stop()
	sctx, cancel := context.WithTimeout(context.Background(), consoleShutdownGrace)
	defer cancel()
	_ = srv.Shutdown(sctx)
	if runsDone != nil && !runsEnded {
		// the serving coordinator hands its runs off before c.Close
		runsErr = <-runsDone
	}
	switch {
	case runsErr != nil:
		return cmd.fail(runsErr)
	case serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed):
		return cmd.fail(serveErr)
	}
	return exitOK
}
