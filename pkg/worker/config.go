package worker

import (
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/internal/natsbus/workerbus"
	"github.com/toolfleet/toolfleet/pkg/config"
	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/mcptool"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// Defaults of [Config].
const (
	DefaultConcurrency         = 16
	DefaultAckWait             = 5 * time.Second
	DefaultStreamCheckInterval = 30 * time.Second
	DefaultVersion             = "0.1.0"
)

// Config configures a [Worker]. Tools (or MCPServers) is required; the zero
// value of every other field means its default.
type Config struct {
	// Tools are the tools to serve: typed Go tools (pkg/tool), harness.Tool
	// values, exec tools of a manifest (harness.LoadManifest). Names must
	// be unique.
	Tools []harness.Tool
	// MCPServers are MCP servers the worker starts and whose tools it
	// serves too; when a server's tool list changes, the worker serves the
	// new list. Default: none.
	MCPServers []mcptool.ServerConfig
	// Prefix is the first token of every subject: the fleet's. Default:
	// "fleet".
	Prefix string
	// JSDomain is the JetStream domain of the fleet's streams, for a worker
	// on a leaf node. Default: the server's own JetStream.
	JSDomain string
	// Name identifies the worker in results and logs: letters, digits, '.',
	// '_' and '-', at most 128. Default: <hostname>-<pid>.
	Name string
	// Version is the version the discovery service announces, a semantic
	// version. Default: DefaultVersion.
	Version string
	// Concurrency bounds the calls the worker runs at once, all tools
	// together. Default: 16.
	Concurrency int
	// AckWait is how long the server waits for the worker's heartbeat
	// before it redelivers a call to another worker: how fast a dead worker
	// is noticed. Fleet-wide: the last worker to start sets it. Default: 5s.
	AckWait time.Duration
	// ShutdownGrace is how long Run waits, once its context ends, for calls
	// in flight before cancelling them. Default: 10s.
	ShutdownGrace time.Duration
	// MaxOutputChars bounds any tool's output, in characters. Default:
	// 100,000.
	MaxOutputChars int
	// StreamCheckInterval is the pause between checks of the fleet's
	// stream configuration. Default: 30s.
	StreamCheckInterval time.Duration
	// LogStderr logs exec tools' and MCP servers' stderr, which may hold
	// secrets. Default: false.
	LogStderr bool
	// NoDiscovery keeps the worker out of the NATS micro discovery
	// service. Default: false, the worker registers.
	NoDiscovery bool
	// Metrics, when set, receives the worker's Prometheus metrics. One
	// registry serves one worker. Default: none.
	Metrics prometheus.Registerer
	// Logger receives one line per call and the worker's warnings. The
	// zero value discards.
	Logger zerolog.Logger
}

// Validate checks c without connecting to anything. Each error is a
// [config.Error] naming the field ("Concurrency", "Tools[1].Name"); New
// calls it first.
func (c Config) Validate() error {
	if _, err := protocol.NewSubjects(c.Prefix); err != nil {
		return config.Errorf("Prefix", "must match %s, got %q", protocol.TokenPattern, clip(c.Prefix))
	}
	if len(c.Tools) == 0 && len(c.MCPServers) == 0 {
		return config.Errorf("Tools", "no tools to serve")
	}
	seen := make(map[string]int, len(c.Tools))
	for i, t := range c.Tools {
		field := fmt.Sprintf("Tools[%d]", i)
		if _, err := protocol.ParseToolName(t.Name); err != nil {
			return config.Errorf(field+".Name", "must match %s, got %q", protocol.TokenPattern, clip(t.Name))
		}
		if j, dup := seen[t.Name]; dup {
			return config.Errorf(field+".Name", "duplicate name %q (Tools[%d])", t.Name, j)
		}
		seen[t.Name] = i
		if _, err := harness.New(harness.Config{}, t); err != nil {
			var te *harness.ToolError
			if errors.As(err, &te) && te.Field != "" {
				return &config.FieldError{Field: field + "." + goField(te.Field), Err: te.Err}
			}
			return &config.FieldError{Field: field, Err: err}
		}
	}
	if c.MaxOutputChars < 0 {
		return config.Errorf("MaxOutputChars", "must be >= 0, got %d", c.MaxOutputChars)
	}
	if c.StreamCheckInterval < 0 {
		return config.Errorf("StreamCheckInterval", "must be > 0, got %v", c.StreamCheckInterval)
	}
	for _, b := range []struct {
		field string
		bad   bool
	}{
		{"Concurrency", c.Concurrency < 0},
		{"AckWait", c.AckWait < 0},
		{"ShutdownGrace", c.ShutdownGrace < 0},
	} {
		if b.bad {
			return config.Errorf(b.field, "must not be negative")
		}
	}
	if err := c.transport().Validate(); err != nil {
		var ce config.Error
		if errors.As(err, &ce) {
			return ce
		}
		return err
	}
	return nil
}

// transport is the transport's worker configuration c describes: the one
// place a worker option reaches it.
func (c Config) transport() workerbus.WorkerConfig {
	return workerbus.WorkerConfig{
		Name:          c.Name,
		Version:       c.Version,
		Concurrency:   c.Concurrency,
		AckWait:       c.AckWait,
		ShutdownGrace: c.ShutdownGrace,
		NoDiscovery:   c.NoDiscovery,
		Logger:        c.Logger,
	}
}

// goField is the Go field of a harness.Tool a manifest field names.
func goField(manifest string) string {
	switch manifest {
	case "name":
		return "Name"
	case "parameters":
		return "Parameters"
	case "timeout":
		return "Timeout"
	case "run":
		return "Run"
	}
	return manifest
}

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
