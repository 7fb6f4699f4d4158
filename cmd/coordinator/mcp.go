package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/internal/coordinator"
	"github.com/toolfleet/toolfleet/internal/mcpserve"
	"github.com/toolfleet/toolfleet/internal/procsec"
	"github.com/toolfleet/toolfleet/pkg/loop"
)

// envMCPTokens holds the bearer tokens "coordinator mcp --transport http"
// accepts, comma-separated.
const envMCPTokens = "TOOLFLEET_MCP_TOKENS"

// mcpFlags are the flags of "coordinator mcp": the fleet flags and the
// transport's.
type mcpFlags struct {
	fleetFlags
	transport   string
	addr        string
	path        string
	noAuth      bool
	noLocalhost bool
	maxCalls    int
	origins     string
	connsPerIP  int
	idle        time.Duration
	read        time.Duration
	write       time.Duration
}

// mcpFleetFlags are the fleet flags "coordinator mcp" uses. The others
// (the model's, --max-rounds, --max-tool-calls-per-round: each MCP call is
// one round of one call) are not defined, so giving one is a usage error
// and --help does not list them.
var mcpFleetFlags = []string{
	"nats-url", "creds", "user", "password", "prefix",
	"workers", "tools", "builtin",
	"max-observation-chars", "tool-timeout", "require-approval", "approval-timeout",
	"trace-args", "log-level", "metrics-addr",
}

func newMCPFlagSet(f *mcpFlags, stderr io.Writer) *flag.FlagSet {
	fs := newFlagSet("coordinator mcp", stderr)
	// The fleet flags are registered on a set of their own (so their
	// defaults are set), and those that apply are taken over.
	all := flag.NewFlagSet("", flag.ContinueOnError)
	f.fleetFlags.register(all, false)
	for _, name := range mcpFleetFlags {
		fl := all.Lookup(name)
		fs.Var(fl.Value, fl.Name, fl.Usage)
	}
	fs.StringVar(&f.transport, "transport", "stdio", "stdio | http (streamable HTTP, stateless)")
	fs.StringVar(&f.addr, "http-addr", "127.0.0.1:8808", "listen `ADDR` of --transport http")
	fs.StringVar(&f.path, "http-path", "/mcp", "URL path of the MCP endpoint")
	fs.BoolVar(&f.noAuth, "no-auth", false, "serve HTTP without bearer tokens (for a reverse proxy that authenticates); otherwise env "+envMCPTokens+" must hold at least one token")
	fs.BoolVar(&f.noLocalhost, "disable-localhost-protection", false, "accept any Host header on a loopback listener (a reverse proxy on the same host)")
	fs.IntVar(&f.maxCalls, "max-concurrent-calls", mcpserve.DefaultMaxConcurrentCalls, fmt.Sprintf("tools/call requests run at once, over every client; more are refused with an \"overloaded\" error (1..%d)", mcpserve.MaxMaxConcurrentCalls))
	fs.StringVar(&f.origins, "allowed-origin", "", "browser origins (comma list of scheme://host[:port]) whose HTTP requests are served besides the server's own (http(s) on --http-addr, and localhost, 127.0.0.1, [::1] at its port on a loopback address); a request with any other Origin header is refused (403). Default: none")
	fs.IntVar(&f.connsPerIP, "http-max-conns-per-addr", mcpserve.DefaultMaxConnsPerAddr, "connections one client address (IP) holds open at once; more are closed as accepted (>= 1)")
	fs.DurationVar(&f.idle, "http-idle-timeout", mcpserve.DefaultIdleTimeout, "close a keep-alive connection idle this long (> 0)")
	fs.DurationVar(&f.read, "http-read-timeout", mcpserve.DefaultReadTimeout, "bound on reading one request, body included (> 0)")
	fs.DurationVar(&f.write, "http-write-timeout", mcpserve.DefaultWriteTimeout, "bound on one response, from its request's headers: longer than the longest call, approval wait included (> 0)")
	return fs
}

// noModel is the model of a coordinator that only serves MCP: runs are made
// by mcpserve's own one-call model.
type noModel struct{}

func (noModel) Complete(context.Context, loop.Request) (*loop.Response, error) {
	return nil, errors.New("coordinator mcp runs no model")
}

// mcpCommand runs "coordinator mcp": serve the fleet's tools to MCP
// clients until the client disconnects (stdio) or SIGINT/SIGTERM.
func mcpCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var f mcpFlags
	fs := newMCPFlagSet(&f, stderr)
	cmd := &command{name: "coordinator mcp", fs: fs, flags: fleetFlagOf, stderr: stderr,
		usage: `[flags]

Serves the fleet's live catalog as MCP tools, over stdio (one client: a
desktop or IDE host starts this command) or streamable HTTP (stateless: run
replicas behind a load balancer). Each tools/call runs like a call of the
loop: validation, approvals (the client waits), a worker, the deadline.

Flags:`,
		exits: "0 stopped (client gone, SIGINT or SIGTERM), 2 bad usage or config, 1 other error"}
	_, set, code, done := cmd.parse(args, nil)
	if done {
		return code
	}
	if err := f.validate(fs, set); err != nil {
		return cmd.fail(err)
	}
	var tokens []string
	for _, t := range strings.Split(procsec.Getenv(envMCPTokens), ",") {
		if t = strings.TrimSpace(t); t != "" {
			tokens = append(tokens, t)
		}
	}
	switch {
	case f.transport != "stdio" && f.transport != "http":
		return cmd.fail(&usageError{fmt.Sprintf("--transport must be stdio or http, got %q", f.transport)})
	case f.transport == "http" && len(tokens) == 0 && !f.noAuth:
		return cmd.fail(&usageError{fmt.Sprintf("--transport http needs bearer tokens in env %s (or --no-auth behind an authenticating proxy)", envMCPTokens)})
	case !strings.HasPrefix(f.path, "/"):
		return cmd.fail(&usageError{fmt.Sprintf("--http-path must start with /, got %q", f.path)})
	case f.connsPerIP < 1:
		return cmd.fail(&usageError{fmt.Sprintf("--http-max-conns-per-addr must be >= 1, got %d", f.connsPerIP)})
	case f.idle <= 0 || f.read <= 0 || f.write <= 0:
		return cmd.fail(&usageError{"--http-idle-timeout, --http-read-timeout and --http-write-timeout must be > 0"})
	case f.maxCalls < 1 || f.maxCalls > mcpserve.MaxMaxConcurrentCalls:
		return cmd.fail(&usageError{fmt.Sprintf("--max-concurrent-calls must be 1..%d, got %d", mcpserve.MaxMaxConcurrentCalls, f.maxCalls)})
	}
	newModel := func(zerolog.Logger) (loop.Model, error) { return noModel{}, nil }
	return f.withCoordinator(ctx, cmd, args, func() error { return nil }, newModel, func(c *coordinator.Coordinator, log zerolog.Logger) int {
		srv, err := mcpserve.New(mcpserve.Config{Logger: log, MaxConcurrentCalls: f.maxCalls}, c.Fleet())
		if err != nil {
			return cmd.fail(&usageError{err.Error()})
		}
		if err := srv.Sync(ctx); err != nil {
			log.Warn().Err(err).Msg("reading the catalog failed")
		}
		sctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go srv.Run(sctx)

		if f.transport == "stdio" {
			log.Info().Int("tools", len(srv.Tools())).Msg("serving MCP on stdio")
			if err := srv.ServeStdio(sctx); err != nil && ctx.Err() == nil && !errors.Is(err, io.EOF) {
				log.Error().Err(err).Msg("MCP stdio session ended")
				return exitError
			}
			return exitOK
		}
		ln, err := net.Listen("tcp", f.addr)
		if err != nil {
			return cmd.fail(&usageError{"--http-addr: " + err.Error()})
		}
		mux := http.NewServeMux()
		mux.Handle(f.path, srv.Handler(mcpserve.HTTPConfig{Tokens: tokens, DisableLocalhostProtection: f.noLocalhost,
			AllowedOrigins: splitList(f.origins), Addr: ln.Addr().String()}))
		hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second,
			ReadTimeout: f.read, WriteTimeout: f.write, IdleTimeout: f.idle}
		ln = mcpserve.LimitPerAddr(ln, f.connsPerIP)
		log.Info().Str("addr", ln.Addr().String()).Str("path", f.path).Bool("auth", len(tokens) > 0).
			Int("tools", len(srv.Tools())).Msg("serving MCP over streamable HTTP")
		errc := make(chan error, 1)
		go func() { errc <- hs.Serve(ln) }()
		select {
		case err := <-errc:
			log.Error().Err(err).Msg("MCP HTTP server stopped")
			return exitError
		case <-ctx.Done():
		}
		shut, cancelShut := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancelShut()
		_ = hs.Shutdown(shut)
		return exitOK
	})
}
