package workerbus

import (
	"fmt"
	"os"
	"regexp"
	"time"

	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natsbus/workqueue"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

const (
	DefaultConcurrency = 16

	DefaultToolMaxAckPending = 256

	DefaultAckWait = 5 * time.Second

	DefaultMaxDeliver = 5

	DefaultShutdownGrace = 10 * time.Second

	DefaultApprovalMaxAge = time.Hour
)

// workerNameRE is the rule for worker names, which appear in results and
// logs.
var workerNameRE = regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}$`)

// WorkerConfig configures a [Worker]. The zero value means the defaults.
type WorkerConfig struct {
	// Name identifies the worker in results and logs. Letters, digits, '.',
	// '_' and '-', at most 128. Default: <hostname>-<pid>.
	Name string
	// Concurrency bounds the calls this worker runs at once, all tools
	// together. It never pulls more calls than it has free slots. A call
	// whose tool has returned gives its slot back while its result is
	// stored, so up to as many again may be waiting to be acknowledged.
	// Default: 16.
	Concurrency int
	// ToolMaxAckPending bounds the calls of one tool in flight across the
	// whole fleet (the shared consumer's MaxAckPending). Default: 256.
	ToolMaxAckPending int
	// AckWait is how long the server waits for a worker's ack or heartbeat
	// before redelivering a call: how fast a dead worker is noticed.
	// Default: 5s.
	AckWait time.Duration
	// Heartbeat is the interval of in-progress signals while an idempotent
	// call runs. It must be shorter than AckWait. Default: AckWait/3.
	Heartbeat time.Duration
	// MaxDeliver bounds the deliveries of one call. Default: 5.
	MaxDeliver int
	// MaxMessageBytes bounds a decoded call and a published result.
	// Default: protocol.DefaultMaxMessageBytes.
	MaxMessageBytes int
	// ShutdownGrace is how long Run waits, once its context ends, for calls
	// in flight to finish before cancelling them. Default: 10s.
	ShutdownGrace time.Duration
	// PollWait is how long one pull waits for a call before it is renewed.
	// Shorter means quicker recovery after a server restart and fairer
	// sharing of slots when a worker serves more tools than it has slots.
	// Default: 1s.
	PollWait time.Duration
	// MaxFetchBatch bounds the calls taken in one pull, never more than the
	// free slots. Default: Concurrency.
	MaxFetchBatch int
	// Logger receives one line per call (its finish, or why it did not
	// run) and the worker's warnings. The zero value discards.
	Logger zerolog.Logger
	// Observer receives every event of the worker's calls (CallEvent),
	// for metrics. Default: nil, observe nothing.
	Observer WorkerObserver
	// Version is the version the worker's discovery service announces; it
	// must be a semantic version. Default: DefaultServiceVersion.
	Version string
	// NoDiscovery keeps the worker from registering its NATS micro service
	// (ServiceName), which lists it and its tools in "nats micro ls" and
	// lets coordinators detect workers that disagree on a tool's schema.
	// Default: false, the worker registers.
	NoDiscovery bool
	// Guard, when set, holds the worker back from taking calls while the
	// fleet's streams differ from their expected configuration. Default:
	// nil, no check.
	Guard *natsbus.StreamGuard
	// Now tells the time, for deadlines. Default: time.Now.
	Now func() time.Time
	// ApprovalMaxAge bounds how long after the operator's decision an
	// approved call's deadline may be: a proof of approval is good for one
	// prompt run of the call. Default: 1h; at most MaxApprovalMaxAge
	// (24h), which the claims stream's records outlive.
	ApprovalMaxAge time.Duration
}

func (c WorkerConfig) withDefaults() WorkerConfig {
	if c.Name == "" {
		c.Name = defaultWorkerName()
	}
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.ToolMaxAckPending == 0 {
		c.ToolMaxAckPending = DefaultToolMaxAckPending
	}
	if c.AckWait == 0 {
		c.AckWait = DefaultAckWait
	}
	if c.Heartbeat == 0 {
		c.Heartbeat = c.AckWait / 3
	}
	if c.MaxDeliver == 0 {
		c.MaxDeliver = DefaultMaxDeliver
	}
	if c.MaxMessageBytes == 0 {
		c.MaxMessageBytes = protocol.DefaultMaxMessageBytes
	}
	if c.ShutdownGrace == 0 {
		c.ShutdownGrace = DefaultShutdownGrace
	}
	if c.PollWait == 0 {
		c.PollWait = workqueue.DefaultPollWait
	}
	if c.MaxFetchBatch == 0 || c.MaxFetchBatch > c.Concurrency {
		c.MaxFetchBatch = c.Concurrency
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Version == "" {
		c.Version = DefaultServiceVersion
	}
	if c.ApprovalMaxAge == 0 {
		c.ApprovalMaxAge = DefaultApprovalMaxAge
	}
	if c.Observer == nil {
		c.Observer = NopWorkerObserver{}
	}
	return c
}

// Validate checks the fields' rules; zero fields are valid (defaults).
func (c WorkerConfig) Validate() error { return c.withDefaults().validate() }

func (c WorkerConfig) validate() error {
	switch {
	case !workerNameRE.MatchString(c.Name):
		return natsbus.ConfigErr("Name", "must be 1-128 letters, digits, '.', '_' or '-'")
	case c.Concurrency < 1 || c.Concurrency > 10_000:
		return natsbus.ConfigErr("Concurrency", "must be 1..10000")
	case c.ToolMaxAckPending < 1:
		return natsbus.ConfigErr("ToolMaxAckPending", "must be >= 1")
	case c.AckWait < 10*time.Millisecond:
		return natsbus.ConfigErr("AckWait", "must be >= 10ms")
	case c.Heartbeat <= 0 || c.Heartbeat >= c.AckWait:
		return natsbus.ConfigErr("Heartbeat", "must be > 0 and shorter than AckWait (%v)", c.AckWait)
	case c.MaxDeliver < 1:
		return natsbus.ConfigErr("MaxDeliver", "must be >= 1")
	case c.MaxMessageBytes < 1024:
		return natsbus.ConfigErr("MaxMessageBytes", "must be >= 1024")
	case c.ShutdownGrace < 0:
		return natsbus.ConfigErr("ShutdownGrace", "must be >= 0")
	case c.PollWait < 10*time.Millisecond:
		return natsbus.ConfigErr("PollWait", "must be >= 10ms")
	case c.MaxFetchBatch < 1:
		return natsbus.ConfigErr("MaxFetchBatch", "must be >= 1")
	case c.ApprovalMaxAge < 0 || c.ApprovalMaxAge > natsbus.MaxApprovalMaxAge:
		return natsbus.ConfigErr("ApprovalMaxAge", "must be 0..%v", natsbus.MaxApprovalMaxAge)
	case len(c.Version) > 64 || !semverRE.MatchString(c.Version):
		return natsbus.ConfigErr("Version", "must be a semantic version such as 1.2.3")
	}
	return nil
}

// defaultWorkerName is <hostname>-<pid>, reduced to the name rule.
func defaultWorkerName() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "worker"
	}
	b := []byte(host)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			b[i] = '_'
		}
	}
	if len(b) > 100 {
		b = b[:100]
	}
	return fmt.Sprintf("%s-%d", b, os.Getpid())
}
