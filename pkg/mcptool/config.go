package mcptool

import (
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// Defaults of [ServerConfig].
const (
	// DefaultCancelGrace is how long a stdio server has to answer a
	// cancelled request before it is killed and restarted.
	DefaultCancelGrace = 2 * time.Second
	// DefaultStartTimeout bounds starting a server and listing its tools.
	DefaultStartTimeout = 60 * time.Second
	// DefaultMaxMessageBytes bounds one message from a server (a bigger one
	// breaks the connection: the call fails with [ErrMessageTooLarge] and a
	// stdio server is restarted).
	DefaultMaxMessageBytes = 16 << 20
	// MinRestartBackoff and MaxRestartBackoff bound the wait before a dead
	// stdio server is started again; it doubles after each quick death.
	MinRestartBackoff = 100 * time.Millisecond
	MaxRestartBackoff = 30 * time.Second
	// MaxServers bounds the MCP servers of one manifest.
	MaxServers = 64
	// MaxTools bounds the tools taken from one server; more are skipped.
	MaxTools = 512
)

// minRedactLen is the shortest environment or header value treated as a
// secret: shorter values ("1", "C") would blank unrelated output.
const minRedactLen = 6

// ServerConfig is one MCP server. Exactly one of Command (stdio) and URL
// (streamable HTTP) is set. The zero value of every other field means its
// default.
type ServerConfig struct {
	// Name names the server in logs and errors; it must match
	// [protocol.TokenPattern].
	Name string
	// Prefix is put before each tool's MCP name to make its fleet name, so
	// two servers never collide. nil: Name + "_". A pointer to "" serves
	// the names unchanged.
	Prefix *string
	// Command is the program and its arguments (stdio). Path is the
	// resolved program.
	Command []string
	Path    string
	// Env is the complete environment of a stdio server (PATH is added
	// when missing). Every value is a secret (see the package doc).
	Env []string
	// Dir is a stdio server's working directory. Empty: the worker's.
	Dir string
	// URL is a streamable-HTTP server's endpoint.
	URL string
	// Headers are sent with every HTTP request. Every value is a secret.
	Headers map[string]string
	// Timeout is the default timeout of the server's tools. 0: the
	// harness default.
	Timeout time.Duration
	// Idempotent and RequiresApproval, when set, apply to every tool of the
	// server. Default (nil): non-idempotent and approval-gated, whatever the
	// server's annotations say (they never lower the caution).
	Idempotent       *bool
	RequiresApproval *bool
	// Tools overrides settings per tool, by MCP name.
	Tools map[string]ToolOverride
	// Allow, when not empty, lists the MCP tool names served; others are
	// skipped.
	Allow []string
	// MaxMessageBytes bounds one message from the server. 0:
	// [DefaultMaxMessageBytes].
	MaxMessageBytes int
	// CancelGrace: see [DefaultCancelGrace]. 0: the default.
	CancelGrace time.Duration
	// TrustCancel: the server stops cancelled work itself, so it is never
	// killed for a cancelled request it leaves unanswered. Servers built
	// on the TypeScript SDK never answer a cancelled request, so without
	// this every timeout or cancel restarts them.
	TrustCancel bool
	// StartTimeout: see [DefaultStartTimeout]. 0: the default.
	StartTimeout time.Duration
	// LogStderr logs a stdio server's stderr lines (redacted, truncated).
	// Default: stderr is discarded, as it may hold secrets.
	LogStderr bool
	// Logger receives the server's lifecycle logs. The zero value discards.
	Logger zerolog.Logger
}

// ToolOverride is what a manifest says about one tool of a server; nil
// fields leave the server-wide value.
type ToolOverride struct {
	Idempotent       *bool
	RequiresApproval *bool
	Timeout          time.Duration
}

func (c ServerConfig) withDefaults() ServerConfig {
	if c.Prefix == nil {
		p := c.Name + "_"
		c.Prefix = &p
	}
	if c.MaxMessageBytes == 0 {
		c.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if c.CancelGrace == 0 {
		c.CancelGrace = DefaultCancelGrace
	}
	if c.StartTimeout == 0 {
		c.StartTimeout = DefaultStartTimeout
	}
	return c
}

// prefixRE is what a prefix may hold: the characters of a tool name.
var prefixRE = regexp.MustCompile(`^[A-Za-z0-9_-]{0,32}$`)

// Validate checks the rules of the fields.
func (c ServerConfig) Validate() error {
	switch {
	case !protocol.ValidToken(c.Name):
		return &ConfigError{Index: -1, Field: "name", Err: errors.New("must match " + protocol.TokenPattern)}
	case len(c.Command) == 0 && c.URL == "":
		return &ConfigError{Index: -1, Server: c.Name, Field: "command", Err: errors.New(`one of "command" (stdio) and "url" (streamable HTTP) is required`)}
	case len(c.Command) > 0 && c.URL != "":
		return &ConfigError{Index: -1, Server: c.Name, Field: "url", Err: errors.New(`give "command" or "url", not both`)}
	case c.Prefix != nil && !prefixRE.MatchString(*c.Prefix):
		return &ConfigError{Index: -1, Server: c.Name, Field: "prefix", Err: errors.New("must match " + prefixRE.String())}
	case c.Timeout < 0, c.CancelGrace < 0, c.StartTimeout < 0:
		return &ConfigError{Index: -1, Server: c.Name, Field: "timeout", Err: errors.New("durations must be > 0")}
	case c.MaxMessageBytes < 0:
		return &ConfigError{Index: -1, Server: c.Name, Field: "max_message_bytes", Err: errors.New("must be > 0")}
	}
	return nil
}

// ConfigError names the server and the field at fault.
type ConfigError struct {
	// Index is the server's position in the manifest's "mcp_servers", or
	// -1 when not from a manifest.
	Index  int
	Server string
	Field  string
	Err    error
}

func (e *ConfigError) Error() string {
	where := "mcp server"
	if e.Server != "" {
		where = fmt.Sprintf("mcp server %q", e.Server)
	}
	if e.Index >= 0 {
		where += fmt.Sprintf(" (mcp_servers[%d])", e.Index)
	}
	if e.Field != "" {
		return fmt.Sprintf("%s: field %q: %v", where, e.Field, e.Err)
	}
	return fmt.Sprintf("%s: %v", where, e.Err)
}

func (e *ConfigError) Unwrap() error { return e.Err }
