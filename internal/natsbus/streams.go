package natsbus

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// Defaults of [StreamConfig].
const (
	DefaultMaxPendingCalls   = 100_000
	DefaultMaxCallsPerClient = 1_000
	DefaultCallsMaxAge       = time.Hour
	DefaultResultsMaxAge     = time.Hour
	DefaultResultsMaxBytes   = 1 << 30
	DefaultApprovalsMaxAge   = 30 * 24 * time.Hour
	// DefaultApprovalsMaxBytes and DefaultApprovalsMaxMsgs bound the
	// approvals stream (the audit log); when full it refuses new entries
	// (discard new) rather than forget old ones, and a request that cannot
	// be stored is never approved.
	DefaultApprovalsMaxBytes = 1 << 30
	DefaultApprovalsMaxMsgs  = 1_000_000
	DefaultMaxQueuedRuns     = 10_000
	// DefaultMaxQueuedRunsPerClient is StreamConfig.MaxQueuedRunsPerClient's
	// default for a new runs stream.
	DefaultMaxQueuedRunsPerClient = 1_000
	DefaultQueuedRunMaxAge        = 24 * time.Hour
	DefaultRunResultTTL           = 24 * time.Hour
	DefaultRunResultsMaxBytes     = 1 << 30
	// DefaultJournalMaxAge keeps a run's journal past its result's TTL.
	DefaultJournalMaxAge = 48 * time.Hour
	// DefaultJournalMaxBytes bounds the journal stream.
	DefaultJournalMaxBytes = 4 << 30
	// DefaultMaxRunResultBytes bounds a stored run result: NATS's default
	// max_payload (1 MiB) less room for headers.
	DefaultMaxRunResultBytes = protocol.DefaultMaxMessageBytes - 8<<10
	// DuplicateWindow is how long the calls and results streams remember a
	// Nats-Msg-Id: a call or result published twice within it is stored once.
	DuplicateWindow = 2 * time.Minute
)

// StreamConfig sizes the fleet's streams. The zero value means the
// defaults.
type StreamConfig struct {
	// Replicas of every stream and the bucket. Default: 1.
	Replicas int
	// PlacementTags place every stream and bucket on JetStream servers
	// that carry all of these tags (nats-server's server_tags), e.g.
	// "ssd" or "az:eu-1a". Default: none, the servers choose.
	PlacementTags []string
	// MaxMessageBytes bounds one call, result, approval or spec. Default:
	// protocol.DefaultMaxMessageBytes (1 MiB, NATS's default max_payload).
	MaxMessageBytes int
	// MaxPendingCalls bounds the calls waiting for a worker, all tools
	// together; beyond it publishing a call fails. Default: 100,000.
	MaxPendingCalls int64
	// MaxCallsPerClient is each client's share of a tool: the calls of
	// one client, tool and class the calls stream holds at most, queued
	// or running (its max_msgs_per_subject, share.go). A call over it
	// waits in its coordinator. 0 keeps the value the stream has (an
	// operator's choice), or 1,000 for a new stream; a value is set by
	// "coordinator provision --max-calls-per-client".
	MaxCallsPerClient int64
	// CallsMaxAge drops calls nobody took. Default: 1h.
	CallsMaxAge time.Duration
	// ResultsMaxAge is how long results are kept. Default: 1h.
	ResultsMaxAge time.Duration
	// ResultsMaxBytes bounds the results stream; the oldest go first.
	// Default: 1 GiB.
	ResultsMaxBytes int64
	// ApprovalsMaxAge is how long the approval audit log is kept. Default:
	// 30 days.
	ApprovalsMaxAge time.Duration
	// ApprovalsMaxBytes and ApprovalsMaxMsgs bound the approval audit log.
	// A full log refuses new requests, decisions and outcomes (discard
	// new): nothing recorded is lost before ApprovalsMaxAge, and a call
	// whose request cannot be stored does not run. Default: 1 GiB and
	// 1,000,000 messages.
	ApprovalsMaxBytes int64
	ApprovalsMaxMsgs  int64
	// MaxQueuedRuns bounds the run requests waiting in the runs stream.
	// Default: 10,000.
	MaxQueuedRuns int64
	// MaxQueuedRunsPerClient is each client's share of the runs stream:
	// the run requests of one client it holds at most, whatever agents
	// they name, queued or running (its max_msgs_per_subject, with
	// discard_new_per_subject, on the subjects its transform stores
	// submissions under: protocol.Subjects.QueuedRuns). The server refuses
	// a client's submission over it, and only that client's. 0 keeps the
	// value the stream has (an operator's choice), or 1,000 for a new
	// stream; a value is set by "coordinator provision
	// --max-queued-runs-per-client".
	MaxQueuedRunsPerClient int64
	// QueuedRunMaxAge drops a run request nobody took. Default: 24h.
	QueuedRunMaxAge time.Duration
	// RunResultTTL is how long a run's result stays in the runs bucket.
	// Default: 24h.
	RunResultTTL time.Duration
	// RunResultsMaxBytes bounds the runs bucket. Default: 1 GiB.
	RunResultsMaxBytes int64
	// MaxRunResultBytes bounds one stored run result. Default: 1 MiB less
	// 8 KiB.
	MaxRunResultBytes int
	// JournalMaxAge is how long a run's journal is kept. Default: 48h.
	JournalMaxAge time.Duration
	// JournalMaxBytes bounds the journal stream; the oldest entries go
	// first. Default: 4 GiB.
	JournalMaxBytes int64
	// OwnRecordTools are the tools with workers of their own (credentials
	// that serve only that tool, "coordinator provision --tool-consumer"):
	// each keeps its execution and start records in a claims and a starts
	// stream of its own (records.go), so that its workers, whatever they
	// write, fill only their own tool's streams. Default: none.
	OwnRecordTools []string
	// MaxClaims bounds each claims stream, the shared one and each own
	// one; full, it refuses approved calls of its tools (not run) until
	// records expire. Default: 1,000,000.
	MaxClaims int64
	// StartsMaxBytes bounds each starts stream, the shared one and each
	// own one; full, it refuses claims, and non-idempotent calls of its
	// tools do not run. Default: 1 GiB.
	StartsMaxBytes int64
}

func (c StreamConfig) withDefaults() StreamConfig {
	if c.Replicas <= 0 {
		c.Replicas = 1
	}
	if c.MaxMessageBytes <= 0 {
		c.MaxMessageBytes = protocol.DefaultMaxMessageBytes
	}
	if c.MaxPendingCalls <= 0 {
		c.MaxPendingCalls = DefaultMaxPendingCalls
	}
	if c.CallsMaxAge <= 0 {
		c.CallsMaxAge = DefaultCallsMaxAge
	}
	if c.ResultsMaxAge <= 0 {
		c.ResultsMaxAge = DefaultResultsMaxAge
	}
	if c.ResultsMaxBytes <= 0 {
		c.ResultsMaxBytes = DefaultResultsMaxBytes
	}
	if c.ApprovalsMaxAge <= 0 {
		c.ApprovalsMaxAge = DefaultApprovalsMaxAge
	}
	if c.ApprovalsMaxBytes <= 0 {
		c.ApprovalsMaxBytes = DefaultApprovalsMaxBytes
	}
	if c.ApprovalsMaxMsgs <= 0 {
		c.ApprovalsMaxMsgs = DefaultApprovalsMaxMsgs
	}
	if c.MaxQueuedRuns <= 0 {
		c.MaxQueuedRuns = DefaultMaxQueuedRuns
	}
	if c.QueuedRunMaxAge <= 0 {
		c.QueuedRunMaxAge = DefaultQueuedRunMaxAge
	}
	if c.RunResultTTL <= 0 {
		c.RunResultTTL = DefaultRunResultTTL
	}
	if c.JournalMaxAge <= 0 {
		c.JournalMaxAge = DefaultJournalMaxAge
	}
	if c.JournalMaxBytes <= 0 {
		c.JournalMaxBytes = DefaultJournalMaxBytes
	}
	if c.RunResultsMaxBytes <= 0 {
		c.RunResultsMaxBytes = DefaultRunResultsMaxBytes
	}
	if c.MaxRunResultBytes <= 0 {
		c.MaxRunResultBytes = DefaultMaxRunResultBytes
	}
	if c.MaxClaims <= 0 {
		c.MaxClaims = DefaultMaxClaims
	}
	if c.StartsMaxBytes <= 0 {
		c.StartsMaxBytes = DefaultStartsMaxBytes
	}
	return c
}

// Validate checks the fields' rules; zero fields are valid (defaults).
func (c StreamConfig) Validate() error {
	switch {
	case c.Replicas < 0 || c.Replicas > 5:
		return ConfigErr("Replicas", "must be 1..5")
	case c.MaxMessageBytes < 0 || c.MaxMessageBytes > 64<<20:
		return ConfigErr("MaxMessageBytes", "must be 1..64 MiB")
	case c.MaxPendingCalls < 0:
		return ConfigErr("MaxPendingCalls", "must be >= 0")
	case c.MaxCallsPerClient < 0:
		return ConfigErr("MaxCallsPerClient", "must be >= 0")
	case c.ResultsMaxBytes < 0:
		return ConfigErr("ResultsMaxBytes", "must be >= 0")
	case c.CallsMaxAge < 0:
		return ConfigErr("CallsMaxAge", "must be >= 0")
	case c.ResultsMaxAge < 0:
		return ConfigErr("ResultsMaxAge", "must be >= 0")
	case c.ApprovalsMaxAge < 0:
		return ConfigErr("ApprovalsMaxAge", "must be >= 0")
	case c.ApprovalsMaxBytes < 0:
		return ConfigErr("ApprovalsMaxBytes", "must be >= 0")
	case c.ApprovalsMaxMsgs < 0:
		return ConfigErr("ApprovalsMaxMsgs", "must be >= 0")
	case c.MaxQueuedRuns < 0:
		return ConfigErr("MaxQueuedRuns", "must be >= 0")
	case c.MaxQueuedRunsPerClient < 0:
		return ConfigErr("MaxQueuedRunsPerClient", "must be >= 0")
	case cmp.Or(c.MaxQueuedRunsPerClient, DefaultMaxQueuedRunsPerClient) >= cmp.Or(c.MaxQueuedRuns, DefaultMaxQueuedRuns):
		// One client could fill the stream every client submits to.
		return ConfigErr("MaxQueuedRunsPerClient", "must be below MaxQueuedRuns (%d), so that no one client can fill the runs stream", cmp.Or(c.MaxQueuedRuns, DefaultMaxQueuedRuns))
	case c.QueuedRunMaxAge < 0:
		return ConfigErr("QueuedRunMaxAge", "must be >= 0")
	case c.RunResultTTL < 0:
		return ConfigErr("RunResultTTL", "must be >= 0")
	case c.RunResultsMaxBytes < 0:
		return ConfigErr("RunResultsMaxBytes", "must be >= 0")
	case c.MaxRunResultBytes < 0 || c.MaxRunResultBytes > 64<<20:
		return ConfigErr("MaxRunResultBytes", "must be 1..64 MiB")
	case c.MaxClaims < 0:
		return ConfigErr("MaxClaims", "must be >= 0")
	case c.StartsMaxBytes < 0:
		return ConfigErr("StartsMaxBytes", "must be >= 0")
	}
	for _, tool := range c.OwnRecordTools {
		if !protocol.ToolName(tool).Valid() {
			return ConfigErr("OwnRecordTools", "a tool name must match %s, got %q", protocol.TokenPattern, clip(tool))
		}
	}
	for _, tag := range c.PlacementTags {
		if !validTag(tag) {
			return ConfigErr("PlacementTags", "a tag must be 1..64 printable characters without spaces or commas, got %q", clip(tag))
		}
	}
	return nil
}

// validTag reports whether tag is a placement tag nats-server can match:
// printable, no space (the server splits on them) or comma (the CLI's
// list separator).
func validTag(tag string) bool {
	if tag == "" || len(tag) > 64 {
		return false
	}
	for _, r := range tag {
		if r <= ' ' || r == ',' || r == 0x7f || r > 0x7e {
			return false
		}
	}
	return true
}

// placement is the Placement of every stream for tags, nil for none.
func placement(tags []string) *jetstream.Placement {
	if len(tags) == 0 {
		return nil
	}
	return &jetstream.Placement{Tags: slices.Clone(tags)}
}

// EnsureStreams creates the fleet's streams and catalog bucket (those of
// coordinators and workers in [FleetStreams]), or updates them to this
// configuration. It is idempotent and safe to run from several processes
// at once. It is for an identity that may change streams (an embedded
// server's owner, tests); a fleet under deploy/nats-server.conf is set up
// by [Provision] and its processes only check ([StreamGuard]).
func EnsureStreams(ctx context.Context, js jetstream.JetStream, s protocol.Subjects, cfg StreamConfig) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	_, err := ProvisionStreams(ctx, js, StreamsOf(FleetStreams(s, cfg), RoleCoordinator|RoleWorker))
	return err
}

// EnsureWorkerStreams is EnsureStreams for the streams a worker uses.
func EnsureWorkerStreams(ctx context.Context, js jetstream.JetStream, s protocol.Subjects, cfg StreamConfig) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	_, err := ProvisionStreams(ctx, js, StreamsOf(FleetStreams(s, cfg), RoleWorker))
	return err
}

// retryCreate runs a create-or-update, retrying when another process
// created the same stream between our update and our create.
func retryCreate(ctx context.Context, f func() error) error {
	var err error
	for range 5 {
		err = f()
		if !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return err
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	return err
}

// ToolCallsSubject is the wildcard of every call to tool, whatever its
// class and client, as discovery shows it: <prefix>.call.<tool>.>.
func ToolCallsSubject(s protocol.Subjects, tool protocol.ToolName) string {
	return strings.TrimSuffix(s.Calls(), ">") + string(tool) + ".>"
}
