package mcpserve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/pkg/config"
	"github.com/toolfleet/toolfleet/pkg/logkey"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
	"github.com/toolfleet/toolfleet/pkg/runner"
)

// Defaults of [Config].
const (
	// DefaultSyncInterval is how often the catalog is compared with the
	// tools served.
	DefaultSyncInterval = time.Second
	// DefaultProgressInterval is the heartbeat of a long call that asked
	// for progress.
	DefaultProgressInterval = 5 * time.Second
	// DefaultMaxConcurrentCalls bounds the tools/call requests the server
	// runs at once (each holds its arguments, up to a NATS message, for as
	// long as it waits for a worker or an approval).
	DefaultMaxConcurrentCalls = 32
	// MaxMaxConcurrentCalls is the largest MaxConcurrentCalls accepted.
	MaxMaxConcurrentCalls = 10000
)

// CodeOverloaded is the JSON-RPC error code of a tools/call refused because
// the server already runs MaxConcurrentCalls calls (in the range the
// JSON-RPC specification leaves to servers).
const CodeOverloaded = -32001

// MetaOutcome is the _meta key of a result's outcome.
const MetaOutcome = "toolfleet/outcome"

// Config configures a [Server]. The zero value of each field means its
// default.
type Config struct {
	// Implementation names the server to clients. Default: toolfleet.
	Implementation mcp.Implementation
	// SyncInterval: see [DefaultSyncInterval].
	SyncInterval time.Duration
	// ProgressInterval: see [DefaultProgressInterval].
	ProgressInterval time.Duration
	// MaxConcurrentCalls bounds the tools/call requests run at once, over
	// every client; one more is refused at once with a JSON-RPC error
	// ([CodeOverloaded]) and never reaches the fleet. Default:
	// [DefaultMaxConcurrentCalls]; at most [MaxMaxConcurrentCalls].
	MaxConcurrentCalls int
	// Logger receives the server's logs (the calls' own lines come from
	// the loop's logger). The zero value discards.
	Logger zerolog.Logger
}

// Fleet is what the server runs calls on: a runner's
// ([runner.Runner.Fleet]). Its Loop holds the limits, approvals and
// observer of every call; MaxRounds is forced to 1.
type Fleet = runner.Fleet

// Server serves a fleet's catalog as MCP tools.
type Server struct {
	cfg   Config
	fleet Fleet
	srv   *mcp.Server

	// slots holds one token per call running (MaxConcurrentCalls).
	slots chan struct{}
	// requests are the contexts of the HTTP requests in flight, by the id
	// Handler gives each (see requestContext).
	requests sync.Map

	mu     sync.Mutex
	served map[string]protocol.ToolSpec
}

// New returns a server; call Sync (or Run) to load the catalog.
func New(cfg Config, fleet Fleet) (*Server, error) {
	if fleet.Catalog == nil || fleet.Dispatcher == nil {
		return nil, errors.New("mcpserve: a catalog and a dispatcher are required")
	}
	if cfg.Implementation.Name == "" {
		cfg.Implementation = mcp.Implementation{Name: "toolfleet", Version: "1"}
	}
	if cfg.SyncInterval <= 0 {
		cfg.SyncInterval = DefaultSyncInterval
	}
	if cfg.ProgressInterval <= 0 {
		cfg.ProgressInterval = DefaultProgressInterval
	}
	if cfg.MaxConcurrentCalls < 0 || cfg.MaxConcurrentCalls > MaxMaxConcurrentCalls {
		return nil, config.Errorf("MaxConcurrentCalls", "must be 1..%d, got %d", MaxMaxConcurrentCalls, cfg.MaxConcurrentCalls)
	}
	if cfg.MaxConcurrentCalls == 0 {
		cfg.MaxConcurrentCalls = DefaultMaxConcurrentCalls
	}
	fleet.Loop.MaxRounds = 1
	fleet.Loop.MaxToolCallsPerRound = 1
	// Check the loop settings once, not at every call.
	if _, err := loop.New(fleet.Loop, &oneCall{}, fleet.Catalog, fleet.Dispatcher, fleet.Gate); err != nil {
		return nil, fmt.Errorf("mcpserve: %w", err)
	}
	s := &Server{cfg: cfg, fleet: fleet, served: map[string]protocol.ToolSpec{}, slots: make(chan struct{}, cfg.MaxConcurrentCalls)}
	s.srv = mcp.NewServer(&cfg.Implementation, &mcp.ServerOptions{
		Instructions: "Tools served by a toolfleet: calls are validated, may wait for an operator's approval, and are answered exactly once.",
	})
	return s, nil
}

// MCP returns the SDK server.
func (s *Server) MCP() *mcp.Server { return s.srv }

// Tools returns the names of the tools served, sorted.
func (s *Server) Tools() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	names := make([]string, 0, len(s.served))
	for n := range s.served {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Sync makes the tools served match the catalog: new and changed specs are
// added, gone ones removed (the SDK tells connected clients the list
// changed).
func (s *Server) Sync(ctx context.Context) error {
	specs, err := s.fleet.Catalog.Tools(ctx)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := make(map[string]bool, len(specs))
	for _, spec := range specs {
		name := string(spec.Name)
		now[name] = true
		if old, ok := s.served[name]; ok && old.SchemaDigest == spec.SchemaDigest &&
			old.Description == spec.Description && old.Idempotent == spec.Idempotent &&
			old.RequiresApproval == spec.RequiresApproval && old.TimeoutMS == spec.TimeoutMS {
			continue
		}
		t, err := toolOf(spec)
		if err != nil {
			s.cfg.Logger.Warn().Str(logkey.Tool, name).Str("error", err.Error()).Msg("catalog tool not served over MCP")
			continue
		}
		s.srv.AddTool(t, s.handler(name))
		s.served[name] = spec
	}
	var gone []string
	for n := range s.served {
		if !now[n] {
			gone = append(gone, n)
			delete(s.served, n)
		}
	}
	if len(gone) > 0 {
		s.srv.RemoveTools(gone...)
	}
	return nil
}

// Run syncs with the catalog every SyncInterval until ctx ends.
func (s *Server) Run(ctx context.Context) {
	t := time.NewTicker(s.cfg.SyncInterval)
	defer t.Stop()
	for {
		if err := s.Sync(ctx); err != nil && ctx.Err() == nil {
			s.cfg.Logger.Warn().Str("error", err.Error()).Msg("reading the catalog failed")
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// toolOf describes a catalog spec as an MCP tool.
func toolOf(spec protocol.ToolSpec) (*mcp.Tool, error) {
	var schema map[string]any
	if err := json.Unmarshal(spec.Parameters, &schema); err != nil {
		return nil, errors.New("parameters are not a JSON object")
	}
	if _, ok := schema["type"]; !ok {
		schema["type"] = "object" // the catalog's schemas always describe an object
	}
	if schema["type"] != "object" {
		return nil, errors.New(`parameters must have type "object"`)
	}
	t := &mcp.Tool{
		Name:        string(spec.Name),
		Description: spec.Description,
		InputSchema: schema,
		Annotations: &mcp.ToolAnnotations{IdempotentHint: spec.Idempotent},
	}
	if spec.RequiresApproval {
		t.Description += "\n\n(Each call waits for an operator's approval.)"
	}
	return t, nil
}

// ServeStdio serves one client on stdin and stdout until it disconnects or
// ctx ends.
func (s *Server) ServeStdio(ctx context.Context) error {
	return s.srv.Run(ctx, &mcp.StdioTransport{})
}

// HTTPConfig configures [Server.Handler].
type HTTPConfig struct {
	// Tokens are the bearer tokens accepted; empty: no authentication
	// (for a reverse proxy that authenticates, or a trusted network).
	Tokens []string
	// DisableLocalhostProtection turns off the SDK's DNS-rebinding
	// protection for servers listening on a loopback address, for a
	// reverse proxy on the same host that forwards its own Host header.
	DisableLocalhostProtection bool
	// AllowedOrigins are the browser origins ("https://app.example.com",
	// scheme://host[:port], compared without regard to case) whose
	// requests are served. A request without an Origin header (every
	// non-browser client) is served; one with any other Origin is refused
	// with 403, whatever its token. Default: none, so no web page can
	// call the tools.
	AllowedOrigins []string
	// Addr is the address the server listens on (host:port, as the
	// listener reports it): a browser on this host may call from the
	// server's own origins — http(s) on Addr, and on a loopback or
	// unspecified address localhost, 127.0.0.1 and [::1] at its port —
	// besides AllowedOrigins. Default: none but AllowedOrigins.
	Addr string
}

// Handler serves streamable HTTP, stateless: no session lives in this
// process, so replicas behind a load balancer answer alike. A request body
// over protocol.DefaultMaxMessageBytes is refused (413), a request from a
// browser origin neither the server's own nor in AllowedOrigins too (403); a client that
// disconnects cancels its call, at any protocol version (even while it
// waits for an approval: it then never runs).
func (s *Server) Handler(cfg HTTPConfig) http.Handler {
	h := http.Handler(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s.srv },
		&mcp.StreamableHTTPOptions{
			Stateless:                  true,
			DisableLocalhostProtection: cfg.DisableLocalhostProtection,
			// No call can be larger than a NATS message.
			MaxRequestBodyBytes: protocol.DefaultMaxMessageBytes,
			// A client that goes away cancels its call (protocol
			// 2026-07-28 on; tieRequest does it for every version).
			PropagateRequestCancellation: true,
		}))
	h = s.tieRequest(h)
	if len(cfg.Tokens) > 0 {
		h = auth.RequireBearerToken(tokenVerifier(cfg.Tokens), &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(h)
	}
	return checkOrigin(cfg.AllowedOrigins, cfg.Addr, h)
}
