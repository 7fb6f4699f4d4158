package natsbus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// Defaults of [StreamConfig].
const (
	DefaultMaxPendingCalls        = 100_000
	DefaultMaxPendingCallsPerTool = 10_000
	DefaultCallsMaxAge            = time.Hour
	DefaultResultsMaxAge          = time.Hour
	DefaultResultsMaxBytes        = 1 << 30
	DefaultApprovalsMaxAge        = 30 * 24 * time.Hour
	// DuplicateWindow is how long the calls and results streams remember a
	// Nats-Msg-Id: a call or result published twice within it is stored once.
	DuplicateWindow = 2 * time.Minute
)

// StreamConfig sizes the fleet's streams. The zero value means the
// defaults.
type StreamConfig struct {
	// Replicas of every stream and the bucket. Default: 1.
	Replicas int
	// MaxMessageBytes bounds one call, result, approval or spec. Default:
	// protocol.DefaultMaxMessageBytes (1 MiB, NATS's default max_payload).
	MaxMessageBytes int
	// MaxPendingCalls bounds the calls waiting for a worker, all tools
	// together; beyond it publishing a call fails. Default: 100,000.
	MaxPendingCalls int64
	// MaxPendingCallsPerTool bounds the calls waiting for one tool, so a
	// tool nobody serves cannot fill the queue for the others. Default:
	// 10,000.
	MaxPendingCallsPerTool int64
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
	if c.MaxPendingCallsPerTool <= 0 {
		c.MaxPendingCallsPerTool = DefaultMaxPendingCallsPerTool
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
	return c
}

// Validate checks the fields' rules; zero fields are valid (defaults).
func (c StreamConfig) Validate() error {
	switch {
	case c.Replicas < 0 || c.Replicas > 5:
		return configErr("Replicas", "must be 1..5")
	case c.MaxMessageBytes < 0 || c.MaxMessageBytes > 64<<20:
		return configErr("MaxMessageBytes", "must be 1..64 MiB")
	case c.MaxPendingCalls < 0:
		return configErr("MaxPendingCalls", "must be >= 0")
	case c.MaxPendingCallsPerTool < 0:
		return configErr("MaxPendingCallsPerTool", "must be >= 0")
	case c.ResultsMaxBytes < 0:
		return configErr("ResultsMaxBytes", "must be >= 0")
	case c.CallsMaxAge < 0:
		return configErr("CallsMaxAge", "must be >= 0")
	case c.ResultsMaxAge < 0:
		return configErr("ResultsMaxAge", "must be >= 0")
	case c.ApprovalsMaxAge < 0:
		return configErr("ApprovalsMaxAge", "must be >= 0")
	}
	return nil
}

// streamConfigs returns the fleet's stream configurations.
func streamConfigs(s protocol.Subjects, c StreamConfig) []jetstream.StreamConfig {
	return []jetstream.StreamConfig{
		{
			Name:                 s.CallsStream(),
			Description:          "toolfleet tool calls waiting for a worker",
			Subjects:             []string{s.Calls()},
			Retention:            jetstream.WorkQueuePolicy,
			Storage:              jetstream.FileStorage,
			Replicas:             c.Replicas,
			MaxAge:               c.CallsMaxAge,
			MaxMsgs:              c.MaxPendingCalls,
			MaxMsgsPerSubject:    c.MaxPendingCallsPerTool,
			MaxBytes:             -1,
			MaxMsgSize:           int32(c.MaxMessageBytes),
			Discard:              jetstream.DiscardNew,
			DiscardNewPerSubject: true,
			Duplicates:           min(DuplicateWindow, c.CallsMaxAge),
		},
		{
			Name:        s.ResultsStream(),
			Description: "toolfleet tool results",
			Subjects:    []string{s.Results()},
			Retention:   jetstream.LimitsPolicy,
			Storage:     jetstream.FileStorage,
			Replicas:    c.Replicas,
			MaxAge:      c.ResultsMaxAge,
			MaxMsgs:     -1,
			MaxBytes:    c.ResultsMaxBytes,
			MaxMsgSize:  int32(c.MaxMessageBytes),
			Discard:     jetstream.DiscardOld,
			Duplicates:  min(DuplicateWindow, c.ResultsMaxAge),
		},
		{
			Name:        s.ApprovalsStream(),
			Description: "toolfleet approval requests, decisions and outcomes (audit log)",
			Subjects:    []string{s.Approvals()},
			Retention:   jetstream.LimitsPolicy,
			Storage:     jetstream.FileStorage,
			Replicas:    c.Replicas,
			MaxAge:      c.ApprovalsMaxAge,
			MaxMsgs:     -1,
			MaxBytes:    -1,
			MaxMsgSize:  int32(c.MaxMessageBytes),
			Discard:     jetstream.DiscardOld,
			DenyDelete:  true,
			DenyPurge:   true,
		},
	}
}

func catalogConfig(s protocol.Subjects, c StreamConfig) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket:       s.CatalogBucket(),
		Description:  "toolfleet tool catalog: tool name -> spec",
		History:      1,
		MaxValueSize: int32(c.MaxMessageBytes),
		Storage:      jetstream.FileStorage,
		Replicas:     c.Replicas,
	}
}

// EnsureStreams creates the fleet's streams and catalog bucket, or updates
// them to this configuration. It is idempotent and safe to run from several
// processes at once.
func EnsureStreams(ctx context.Context, js jetstream.JetStream, s protocol.Subjects, cfg StreamConfig) error {
	return ensure(ctx, js, s, cfg, true)
}

// EnsureWorkerStreams is EnsureStreams without the approvals stream, which
// is the audit log: workers have no business with it, and under
// deploy/nats-server.conf they are not allowed to touch it (whoever may
// update a stream may shorten its MaxAge and so erase it).
func EnsureWorkerStreams(ctx context.Context, js jetstream.JetStream, s protocol.Subjects, cfg StreamConfig) error {
	return ensure(ctx, js, s, cfg, false)
}

func ensure(ctx context.Context, js jetstream.JetStream, s protocol.Subjects, cfg StreamConfig, approvals bool) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	cfg = cfg.withDefaults()
	for _, sc := range streamConfigs(s, cfg) {
		if !approvals && sc.Name == s.ApprovalsStream() {
			continue
		}
		if err := retryCreate(ctx, func() error {
			_, err := CreateOrUpdateStream(ctx, js, sc)
			return err
		}); err != nil {
			return fmt.Errorf("natsbus: stream %s: %w", sc.Name, err)
		}
	}
	kc := catalogConfig(s, cfg)
	if err := retryCreate(ctx, func() error {
		_, err := CreateOrUpdateKeyValue(ctx, js, kc)
		return err
	}); err != nil {
		return fmt.Errorf("natsbus: bucket %s: %w", kc.Bucket, err)
	}
	return nil
}

// CreateOrUpdateStream creates the stream of cfg, or updates it when it
// exists with another configuration; one that already has cfg is left
// untouched. (jetstream's CreateOrUpdateStream updates first, and an
// update rewrites the stream's configuration even when nothing changed —
// which nats-server races against a consumer being created on the same
// stream, as happens whenever several fleet processes start at once.)
func CreateOrUpdateStream(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	s, err := js.CreateStream(ctx, cfg)
	if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		return js.UpdateStream(ctx, cfg)
	}
	return s, err
}

// CreateOrUpdateKeyValue is [CreateOrUpdateStream] for a KV bucket.
func CreateOrUpdateKeyValue(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	kv, err := js.CreateKeyValue(ctx, cfg)
	if errors.Is(err, jetstream.ErrBucketExists) {
		return js.UpdateKeyValue(ctx, cfg)
	}
	return kv, err
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
