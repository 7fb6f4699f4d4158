package coordinator

import (
	"errors"
	"net"
	"strconv"
	"time"

	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/pkg/agent"
	"github.com/toolfleet/toolfleet/pkg/config"
	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// Config configures a Coordinator. The zero value runs the bundled demo on an
// embedded server with one in-process worker serving the built-in tools.
type Config struct {
	// Conn says how to reach NATS. An empty URL (and no NATS_URL in the
	// environment) starts an embedded JetStream server in StoreDir.
	Conn natsbus.ConnConfig
	// Prefix is the first token of every subject. Default: "fleet".
	Prefix string
	// StoreDir holds the embedded server's JetStream store. Default: a new
	// temporary directory, removed by Close.
	StoreDir string
	// Listen, with the embedded server, opens its TCP client listener on
	// this HOST:PORT (port 0: a random one). The server then accepts the
	// users of embedded.FleetAccounts, with the permissions of their roles in
	// deploy/nats-server.conf: coordinator (this process, in process only,
	// its password drawn and never written), worker and client (passwords
	// from TOOLFLEET_WORKER_PASSWORD and TOOLFLEET_CLIENT_PASSWORD, else
	// drawn at start and written to CredentialsFile and worker.env next to
	// it) and operator (only with TOOLFLEET_OPERATOR_PASSWORD, never
	// written: the tools this process runs can read what it writes).
	// Default: no listener, in-process connections only.
	Listen string
	// CredentialsFile is where a listening embedded server's URL and the
	// client user's drawn password are written (mode 0600, NATS_URL=,
	// NATS_USER=, NATS_PASSWORD=, NATS_INBOX_PREFIX= lines); the worker's
	// go to worker.env in the same directory. Default: nats.env in the
	// store directory.
	CredentialsFile string
	// Workers is the number of in-process toolworkers. Default (0): 1 with
	// the embedded server, none with a remote one.
	Workers int
	// ToolsFile is a tool manifest for in-process workers.
	ToolsFile string
	// Builtins names built-in tools for in-process workers. Default:
	// calculator and echo when ToolsFile is empty.
	Builtins []string
	// CatalogWait bounds how long Open waits for the catalog to list at
	// least one tool. Default: 5s.
	CatalogWait time.Duration
	// Model answers the loop. Required.
	Model loop.Model
	// Loop configures the ReAct loop; its zero value means the defaults.
	Loop loop.Config
	// Agent, when set, is the one agent every run of this coordinator runs
	// as (coordinator run --agent FILE): its instructions open each run,
	// the model is offered only its tools, and its limits, approvals and
	// budget apply over Loop. Model must be the agent's: one that names
	// another provider or model is refused (runner.Config.Agent).
	// Default: none.
	Agent *agent.Definition
	// MetricsAddr, when set, serves Prometheus /metrics, /healthz and
	// /readyz on this address (e.g. ":9090") from Open to Close: the
	// coordinator's and its in-process workers' metrics. Default: none.
	MetricsAddr string
	// StreamCheckInterval is the pause between checks of the fleet's
	// stream configuration. Default: 30s.
	StreamCheckInterval time.Duration
	// Logger receives the coordinator's and the loop's logs. The zero value
	// discards them.
	Logger zerolog.Logger
}

func (c Config) withDefaults(embedded bool) Config {
	if c.Workers <= 0 && embedded {
		c.Workers = 1
	}
	if c.Workers < 0 {
		c.Workers = 0
	}
	if c.ToolsFile == "" && len(c.Builtins) == 0 {
		c.Builtins = []string{"calculator", "echo"}
	}
	if c.CatalogWait <= 0 {
		c.CatalogWait = 5 * time.Second
	}
	return c
}

// Validate checks c before anything starts: the prefix, the connection
// settings, the embedded server's store and listen address, the metrics
// address, the workers' tools and the
// loop's limits. Each error is a [config.Error] naming the Config field
// ("Loop.MaxRounds", "Conn.CredsFile"); Open calls it first.
func (c Config) Validate() error {
	if _, err := protocol.NewSubjects(c.Prefix); err != nil {
		return config.Errorf("Prefix", "must match %s, got %q", protocol.TokenPattern, clipField(c.Prefix))
	}
	if err := c.Conn.Validate(); err != nil {
		var ce config.Error
		if errors.As(err, &ce) {
			return config.Prefix("Conn", ce)
		}
		return err
	}
	if c.Workers < 0 {
		return config.Errorf("Workers", "must be >= 0, got %d", c.Workers)
	}
	if c.StreamCheckInterval < 0 {
		return config.Errorf("StreamCheckInterval", "must be > 0, got %v", c.StreamCheckInterval)
	}
	if c.StoreDir != "" && c.Conn.URL != "" {
		return config.Errorf("StoreDir", "is for the embedded server: it cannot be used with a NATS URL")
	}
	if c.Listen != "" {
		if c.Conn.URL != "" {
			return config.Errorf("Listen", "is for the embedded server: it cannot be used with a NATS URL")
		}
		if !validHostPort(c.Listen) {
			return config.Errorf("Listen", "must be HOST:PORT or :PORT, got %q", clipField(c.Listen))
		}
	}
	if c.MetricsAddr != "" && !validHostPort(c.MetricsAddr) {
		return config.Errorf("MetricsAddr", "must be HOST:PORT or :PORT, got %q", clipField(c.MetricsAddr))
	}
	if c.ToolsFile != "" {
		if _, err := harness.LoadManifest(c.ToolsFile); err != nil {
			return &config.FieldError{Field: "ToolsFile", Err: err}
		}
	}
	if _, err := harness.Builtins(c.Builtins); err != nil {
		return &config.FieldError{Field: "Builtins", Err: err}
	}
	if err := c.Loop.Validate(); err != nil {
		var ce config.Error
		if errors.As(err, &ce) {
			return config.Prefix("Loop", ce)
		}
		return err
	}
	return nil
}

// validHostPort reports whether s is HOST:PORT or :PORT with a port from 0
// to 65535.
func validHostPort(s string) bool {
	_, port, err := net.SplitHostPort(s)
	if err != nil {
		return false
	}
	n, err := strconv.Atoi(port)
	return err == nil && n >= 0 && n <= 65535
}

// clipField bounds a value quoted in a configuration error.
func clipField(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
