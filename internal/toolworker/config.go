package toolworker

import (
	"fmt"
	"time"

	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/internal/natsbus"
)

// Config configures a toolworker. Tools come from ToolsFile and Builtins
// together; at least one tool is required.
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
	// Concurrency bounds the calls run at once. Default: 16.
	Concurrency int
	// Name identifies the worker in results and logs. Default:
	// <hostname>-<pid>.
	Name string
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
	// Worker holds the worker's other settings; Concurrency, Name and Logger
	// above take precedence over its fields.
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

// ConfigError is a configuration value that cannot work. Flag names the
// command-line flag (or environment variable) that set it.
type ConfigError struct {
	Flag string
	Err  error
}

func (e *ConfigError) Error() string { return fmt.Sprintf("%s: %v", e.Flag, e.Err) }

func (e *ConfigError) Unwrap() error { return e.Err }

// flagOf maps a natsbus configuration field to the flag that sets it.
var flagOf = map[string]string{
	"CredsFile":   "--creds",
	"User":        "--user",
	"NKeyFile":    "NATS_NKEY",
	"auth":        "--creds/--user/--password (or NATS_CREDS, NATS_USER, NATS_TOKEN, NATS_NKEY)",
	"Name":        "--name",
	"Concurrency": "--concurrency",
}
