package toolworker

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/pkg/config"
	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/mcptool"
)

// Config configures a toolworker. Tools come from Tools, MCPServers,
// ToolsFile and Builtins together; at least one tool is required.
type Config struct {
	// Conn says how to reach NATS (Run only; New takes a connection).
	Conn natsbus.ConnConfig
	// Prefix is the first token of every subject. Default: "fleet".
	Prefix string
	// ToolsFile is a tool manifest (see harness.ParseManifest). Default:
	// none.
	ToolsFile string
	// Builtins names built-in tools to serve ("calculator", "echo").
	// Default: none.
	Builtins []string
	// Tools are tools given as values (Go tools, exec tools already
	// loaded), served before those of ToolsFile and Builtins. Default: none.
	Tools []harness.Tool
	// MCPServers are MCP servers whose tools are served, with those the
	// manifest lists. Their Logger and LogStderr are this Config's.
	// Default: none.
	MCPServers []mcptool.ServerConfig
	// Metrics, when set (and MetricsAddr is not), receives the worker's
	// metrics: New registers them, so one registry serves one worker.
	// Default: none.
	Metrics prometheus.Registerer
	// LogStderr logs exec tools' stderr, which may hold secrets. Default:
	// false.
	LogStderr bool
	// MaxOutputChars bounds any tool output, in runes. Default:
	// harness.DefaultMaxOutputChars (100,000; protocol.DefaultMaxOutputChars).
	MaxOutputChars int
	// MetricsAddr, when set, makes Run serve /metrics, /healthz and /readyz
	// on this address (e.g. ":9090"); the worker's metrics then take the
	// place of Worker.Observer. Default: none.
	MetricsAddr string
	// Worker holds the worker's settings: its Name (default
	// <hostname>-<pid>), Concurrency (default 16), ack wait and the rest.
	// Logger above takes the place of Worker.Logger.
	Worker natsbus.WorkerConfig
	// Streams is the fleet's stream configuration: what this worker
	// creates when a stream is missing (and the server lets it) and what it
	// checks the streams against. Default: the defaults.
	Streams natsbus.StreamConfig
	// StreamCheckInterval is the pause between checks of the stream
	// configuration. Default: 30s.
	StreamCheckInterval time.Duration
	// Logger receives the worker's logs. The zero value discards.
	Logger zerolog.Logger
}

// configErr returns the [config.Error] of field.
func configErr(field string, err error) error {
	return &config.FieldError{Field: field, Err: err}
}
