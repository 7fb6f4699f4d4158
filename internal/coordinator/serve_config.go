package coordinator

import (
	"fmt"
	"os"
	"time"

	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// Defaults of [ServeConfig].
const (
	DefaultMaxConcurrentRuns = 16
	DefaultShutdownGrace     = 30 * time.Second
	DefaultRunAckWait        = 30 * time.Second
	// DefaultRunMaxDeliver counts hand-offs too: every coordinator that
	// takes a run, after a crash or a hand-off, is one delivery.
	DefaultRunMaxDeliver   = 10
	DefaultMaxQueuedRuns   = 10_000
	DefaultQueuedRunMaxAge = 24 * time.Hour
	DefaultResultTTL       = 24 * time.Hour
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

// ServeConfig configures [Coordinator.Serve]. The zero value means the
// defaults. The loop limits of the Coordinator's Config are the ceilings:
// a request may lower them, never raise them.
//
// Settings of the shared stream, consumer and bucket (AckWait, MaxDeliver,
// MaxQueuedRuns, QueuedRunMaxAge, ResultTTL, ResultsMaxBytes, Replicas) are
// fleet-wide: the coordinator that starts last decides them.
type ServeConfig struct {
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
	// AfterAppend, when set, is called after each entry the loop journals
	// is stored: a fault-injection point for tests. Default: nil.
	AfterAppend func(loop.JournalEntry)
}

func (c ServeConfig) withDefaults() ServeConfig {
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

// ServeConfigError names a [ServeConfig] field (its Go name) and the rule
// its value breaks. It is a [config.Error].
type ServeConfigError struct {
	Field string
	Value any
	Rule  string
}

func (e *ServeConfigError) Error() string {
	return "coordinator: ServeConfig." + e.Field + " " + e.ConfigProblem()
}

// ConfigField returns e.Field.
func (e *ServeConfigError) ConfigField() string { return e.Field }

// ConfigProblem returns the rule and the value.
func (e *ServeConfigError) ConfigProblem() string {
	return fmt.Sprintf("must be %s, got %v", e.Rule, e.Value)
}

// Validate checks c after defaults are applied. The error is a
// [*ServeConfigError].
func (c ServeConfig) Validate() error {
	c = c.withDefaults()
	switch {
	case c.MaxConcurrentRuns < 1 || c.MaxConcurrentRuns > 10_000:
		return &ServeConfigError{"MaxConcurrentRuns", c.MaxConcurrentRuns, "1..10000"}
	case c.MaxRequestBytes < 1 || c.MaxRequestBytes > runsMaxMsgSize:
		return &ServeConfigError{"MaxRequestBytes", c.MaxRequestBytes, "1..1048576"}
	case c.MaxResultBytes < 1024 || c.MaxResultBytes > 64<<20:
		return &ServeConfigError{"MaxResultBytes", c.MaxResultBytes, "1 KiB..64 MiB"}
	case c.ShutdownGrace < 0:
		return &ServeConfigError{"ShutdownGrace", c.ShutdownGrace, ">= 0"}
	case c.AckWait < 100*time.Millisecond:
		return &ServeConfigError{"AckWait", c.AckWait, ">= 100ms"}
	case c.MaxDeliver < 1:
		return &ServeConfigError{"MaxDeliver", c.MaxDeliver, ">= 1"}
	case c.MaxQueuedRuns < 1:
		return &ServeConfigError{"MaxQueuedRuns", c.MaxQueuedRuns, ">= 1"}
	case c.QueuedRunMaxAge < 0:
		return &ServeConfigError{"QueuedRunMaxAge", c.QueuedRunMaxAge, ">= 0"}
	case c.ResultTTL < 0:
		return &ServeConfigError{"ResultTTL", c.ResultTTL, ">= 0"}
	case c.ResultsMaxBytes < 0:
		return &ServeConfigError{"ResultsMaxBytes", c.ResultsMaxBytes, ">= 0"}
	case c.Replicas < 1 || c.Replicas > 5:
		return &ServeConfigError{"Replicas", c.Replicas, "1..5"}
	case c.PollWait < 10*time.Millisecond:
		return &ServeConfigError{"PollWait", c.PollWait, ">= 10ms"}
	case len(c.Name) > 128:
		return &ServeConfigError{"Name", len(c.Name), "at most 128 bytes long"}
	}
	return nil
}
