package serve

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/pkg/agent"
	"github.com/toolfleet/toolfleet/pkg/config"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// Defaults of [Config].
const (
	// DefaultMaxConcurrentRuns is Config.MaxConcurrentRuns's default.
	DefaultMaxConcurrentRuns = 16
	// DefaultShutdownGrace is Config.ShutdownGrace's default.
	DefaultShutdownGrace = 30 * time.Second
	// DefaultRunAckWait is Config.AckWait's default.
	DefaultRunAckWait = 30 * time.Second
	// DefaultRunMaxDeliver counts hand-offs too: every coordinator that
	// takes a run, after a crash or a hand-off, is one delivery.
	DefaultRunMaxDeliver = 10
	// DefaultMaxQueuedRuns is Config.MaxQueuedRuns's default.
	DefaultMaxQueuedRuns = 10_000
	// DefaultQueuedRunMaxAge is Config.QueuedRunMaxAge's default.
	DefaultQueuedRunMaxAge = 24 * time.Hour
	// DefaultResultTTL is Config.ResultTTL's default.
	DefaultResultTTL = 24 * time.Hour
	// DefaultResultsMaxBytes is Config.ResultsMaxBytes's default.
	DefaultResultsMaxBytes = 1 << 30
	// DefaultMaxResultBytes bounds a stored result: NATS's default
	// max_payload (1 MiB) less room for headers.
	DefaultMaxResultBytes = protocol.DefaultMaxMessageBytes - 8<<10
	// runsDuplicateWindow is how long the runs stream remembers a request's
	// Nats-Msg-Id.
	runsDuplicateWindow = 2 * time.Minute
	// runsMaxMsgSize bounds a stored request whatever a coordinator's
	// MaxRequestBytes: the stream is shared, so its limit is fixed.
	runsMaxMsgSize = protocol.DefaultMaxMessageBytes
)

// Config configures a [Server]. The zero value means the defaults: a
// server on the "fleet" prefix that runs every stored agent whose model
// Models builds, with the loop's default limits as ceilings (a request may
// lower them, never raise them), and no metrics.
//
// Settings of the shared stream, consumer and bucket (AckWait, MaxDeliver,
// MaxQueuedRuns, QueuedRunMaxAge, ResultTTL, ResultsMaxBytes, Replicas) are
// fleet-wide: the coordinator that starts last decides them.
type Config struct {
	// Prefix is the first token of every subject: the fleet's. Default:
	// "fleet".
	Prefix string
	// JSDomain is the JetStream domain of the fleet's streams. Default: the
	// server's own JetStream.
	JSDomain string
	// Models builds the model client of a stored agent's model, for each
	// run of that agent (providers.Models.Model builds those of the
	// shipped providers; a program that serves its own agents may build
	// its own). It may return the same client for the same model. Default:
	// none, and a run of a stored agent is refused ("invalid_field" agent,
	// naming this field).
	Models func(agent.Model) (loop.Model, error)
	// Model answers the runs of the default agent while the fleet stores
	// none ([agent.DefaultName]), with no instructions and every tool.
	// Default: none, and such a run is refused ("invalid_field" agent).
	Model loop.Model
	// Loop holds the ceilings of every run's limits (rounds, calls per
	// round, observation size, tool timeout, run duration), the operator's
	// approval settings, and the loop's observer and tracer provider; an
	// agent's limits apply under them. Its Logger is this Config's.
	// Default: the loop's defaults.
	Loop loop.Config
	// Registerer receives the server's metrics: runs, calls, model calls,
	// per-agent spend, shares held, refused messages and stream checks
	// (docs/operations.md lists them). A collector of the same name already
	// registered there (by another component of the process) is shared.
	// Default: nil, no metrics.
	Registerer prometheus.Registerer
	// ProvisionStreams creates or updates every stream and bucket the
	// fleet uses to its expected configuration (this Config's for the runs
	// stream and bucket): for a connection whose user owns them, as in a
	// program that starts its own server. Default: false, a missing one is
	// created when the server lets the user, and none is changed.
	ProvisionStreams bool
	// StreamCheckInterval is the pause between checks of the streams'
	// configuration; while one differs the server takes no run. Default:
	// 30s.
	StreamCheckInterval time.Duration
	// Logger receives the server's and the loop's logs. The zero value
	// discards them.
	Logger zerolog.Logger
	// Name identifies this coordinator in run results and logs. Default:
	// <hostname>-<pid>.
	Name string
	// MaxConcurrentRuns bounds the runs this coordinator runs at once. It
	// never takes a request from the stream without a free slot for it.
	// Default: 16.
	MaxConcurrentRuns int
	// MaxRequestBytes bounds a run request; a larger one is refused with
	// code too_large. At most 1 MiB. Default: 256 KiB.
	MaxRequestBytes int
	// MaxResultBytes bounds a stored result: above it the transcript is
	// left out (transcript_omitted). Default: 1 MiB less 8 KiB, and never
	// more than the server's max_payload less 8 KiB.
	MaxResultBytes int
	// ShutdownGrace is how long, once ctx ends, the runs in flight may
	// finish before they are cancelled. Default: 30s.
	ShutdownGrace time.Duration
	// AckWait is how long a request taken by a coordinator that stopped
	// (crashed, partitioned) stays with it before another coordinator takes
	// it; a running run heartbeats every third of it. Default: 30s.
	AckWait time.Duration
	// MaxDeliver bounds how often one request is taken (a hand-off counts
	// as one): a run whose coordinators keep dying is given up after it.
	// Default: 10.
	MaxDeliver int
	// MaxQueuedRuns bounds the requests waiting in the stream; beyond it
	// submissions are refused as unavailable. Default: 10,000.
	MaxQueuedRuns int64
	// MaxQueuedRunsPerClient is each client's share of the stream: the
	// requests of one client it holds at most, whatever agents they name,
	// queued or running; beyond it the server refuses that client's
	// submissions, and only its. It must be below MaxQueuedRuns. 0 keeps the value the stream has (set by "coordinator
	// provision --max-queued-runs-per-client"), or 1,000 for a new
	// stream.
	MaxQueuedRunsPerClient int64
	// QueuedRunMaxAge drops a request nobody took. Default: 24h.
	QueuedRunMaxAge time.Duration
	// ResultTTL is how long a result stays in the runs bucket. Default: 24h.
	ResultTTL time.Duration
	// ResultsMaxBytes bounds the runs bucket. Default: 1 GiB.
	ResultsMaxBytes int64
	// Replicas of the runs stream and bucket. Default: 1.
	Replicas int
	// PollWait bounds one pull request for a run; shutting down waits for
	// the pull in progress. Default: 1s.
	PollWait time.Duration
	// NoCallStarts stops the runs' calls' started notices: a worker then
	// sends one only where the loop needs it, and a run's client (and the
	// console) learns of a call's start only from its answer. Each notice
	// is one more core NATS message per call. Default: false, every call
	// asks for its notice, and its start is passed on to the run's client
	// on the run's progress subject ([protocol.CallStarted]).
	NoCallStarts bool
	// AfterAppend, when set, is called after each entry the loop journals
	// is stored: a fault-injection point for tests of crashes between
	// steps. Default: nil.
	AfterAppend func(loop.JournalEntry)
}

func (c Config) withDefaults() Config {
	if c.StreamCheckInterval == 0 {
		c.StreamCheckInterval = natsbus.DefaultStreamCheckInterval
	}
	if c.Name == "" {
		host, _ := os.Hostname()
		if host == "" {
			host = "coordinator"
		}
		c.Name = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	if c.MaxConcurrentRuns == 0 {
		c.MaxConcurrentRuns = DefaultMaxConcurrentRuns
	}
	if c.MaxRequestBytes == 0 {
		c.MaxRequestBytes = protocol.DefaultMaxRunRequestBytes
	}
	if c.MaxResultBytes == 0 {
		c.MaxResultBytes = DefaultMaxResultBytes
	}
	if c.ShutdownGrace == 0 {
		c.ShutdownGrace = DefaultShutdownGrace
	}
	if c.AckWait == 0 {
		c.AckWait = DefaultRunAckWait
	}
	if c.MaxDeliver == 0 {
		c.MaxDeliver = DefaultRunMaxDeliver
	}
	if c.MaxQueuedRuns == 0 {
		c.MaxQueuedRuns = DefaultMaxQueuedRuns
	}
	if c.QueuedRunMaxAge == 0 {
		c.QueuedRunMaxAge = DefaultQueuedRunMaxAge
	}
	if c.ResultTTL == 0 {
		c.ResultTTL = DefaultResultTTL
	}
	if c.ResultsMaxBytes == 0 {
		c.ResultsMaxBytes = DefaultResultsMaxBytes
	}
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.PollWait == 0 {
		c.PollWait = time.Second
	}
	return c
}

// ConfigError names a [Config] field (its Go name) and the rule
// its value breaks. It is a [config.Error].
type ConfigError struct {
	// Field is the Config field's Go name ("MaxConcurrentRuns").
	Field string
	// Value is the value refused.
	Value any
	// Rule is what the value must be ("1..10000").
	Rule string
}

// Error says which field breaks which rule.
func (e *ConfigError) Error() string {
	return "serve: Config." + e.Field + " " + e.ConfigProblem()
}

// ConfigField returns e.Field.
func (e *ConfigError) ConfigField() string { return e.Field }

// ConfigProblem returns the rule and the value.
func (e *ConfigError) ConfigProblem() string {
	return fmt.Sprintf("must be %s, got %v", e.Rule, e.Value)
}

// Validate checks c after defaults are applied, without connecting to
// anything. The error is a [*ConfigError]; one in Loop is the loop's
// [config.Error] under "Loop.". New calls it first.
func (c Config) Validate() error {
	if _, err := protocol.NewSubjects(c.Prefix); err != nil {
		return &ConfigError{"Prefix", clip(c.Prefix), "a subject token (" + protocol.TokenPattern + ")"}
	}
	if c.StreamCheckInterval < 0 {
		return &ConfigError{"StreamCheckInterval", c.StreamCheckInterval, "> 0"}
	}
	if err := c.Loop.Validate(); err != nil {
		var ce config.Error
		if errors.As(err, &ce) {
			return config.Prefix("Loop", ce)
		}
		return err
	}
	c = c.withDefaults()
	switch {
	case c.MaxConcurrentRuns < 1 || c.MaxConcurrentRuns > 10_000:
		return &ConfigError{"MaxConcurrentRuns", c.MaxConcurrentRuns, "1..10000"}
	case c.MaxRequestBytes < 1 || c.MaxRequestBytes > runsMaxMsgSize:
		return &ConfigError{"MaxRequestBytes", c.MaxRequestBytes, "1..1048576"}
	case c.MaxResultBytes < 1024 || c.MaxResultBytes > 64<<20:
		return &ConfigError{"MaxResultBytes", c.MaxResultBytes, "1 KiB..64 MiB"}
	case c.ShutdownGrace < 0:
		return &ConfigError{"ShutdownGrace", c.ShutdownGrace, ">= 0"}
	case c.AckWait < 100*time.Millisecond:
		return &ConfigError{"AckWait", c.AckWait, ">= 100ms"}
	case c.MaxDeliver < 1:
		return &ConfigError{"MaxDeliver", c.MaxDeliver, ">= 1"}
	case c.MaxQueuedRuns < 1:
		return &ConfigError{"MaxQueuedRuns", c.MaxQueuedRuns, ">= 1"}
	case c.MaxQueuedRunsPerClient < 0:
		return &ConfigError{"MaxQueuedRunsPerClient", c.MaxQueuedRunsPerClient, ">= 0"}
	case c.QueuedRunMaxAge < 0:
		return &ConfigError{"QueuedRunMaxAge", c.QueuedRunMaxAge, ">= 0"}
	case c.ResultTTL < 0:
		return &ConfigError{"ResultTTL", c.ResultTTL, ">= 0"}
	case c.ResultsMaxBytes < 0:
		return &ConfigError{"ResultsMaxBytes", c.ResultsMaxBytes, ">= 0"}
	case c.Replicas < 1 || c.Replicas > 5:
		return &ConfigError{"Replicas", c.Replicas, "1..5"}
	case c.PollWait < 10*time.Millisecond:
		return &ConfigError{"PollWait", c.PollWait, ">= 10ms"}
	case len(c.Name) > 128:
		return &ConfigError{"Name", len(c.Name), "at most 128 bytes long"}
	}
	return nil
}

// clip bounds a value quoted in a configuration error.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
