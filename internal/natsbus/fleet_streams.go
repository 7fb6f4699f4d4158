package natsbus

import (
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// Role is a kind of fleet process. The expected stream configuration says
// which roles use (and so check) each stream.
type Role uint8

// Roles of fleet processes.
const (
	// RoleCoordinator runs the loop (coordinator run, coordinator serve).
	RoleCoordinator Role = 1 << iota
	// RoleServe is a coordinator serving runs (coordinator serve).
	RoleServe
	// RoleWorker runs tools (toolworker).
	RoleWorker
)

// FleetStream is one stream or key-value bucket of the fleet with the
// configuration it must have.
type FleetStream struct {
	// Config is the stream's configuration; for a bucket, the
	// configuration of the stream that backs it (KV_<bucket>).
	Config jetstream.StreamConfig
	// Bucket is the key-value bucket's name, "" for a plain stream.
	Bucket string
	// Roles are the processes that use the stream and check it.
	Roles Role
}

// FleetStreams is the single list of the fleet's streams and buckets with
// their expected configuration: what [Provision] creates and what every
// process checks ([StreamGuard]). A new stream is added here, and nowhere
// else.
func FleetStreams(s protocol.Subjects, cfg StreamConfig) []FleetStream {
	c := cfg.withDefaults()
	list := []FleetStream{
		{Roles: RoleCoordinator | RoleWorker, Config: jetstream.StreamConfig{
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
		}},
		{Roles: RoleCoordinator | RoleWorker, Config: jetstream.StreamConfig{
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
		}},
		{Roles: RoleCoordinator | RoleWorker, Config: jetstream.StreamConfig{
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
			Duplicates:  min(DuplicateWindow, c.ApprovalsMaxAge),
			DenyDelete:  true,
			DenyPurge:   true,
			// Workers read a decision back by its sequence (direct get).
			AllowDirect: true,
		}},
		bucket(RoleCoordinator|RoleWorker, s.CatalogBucket(), "toolfleet tool catalog: tool name -> spec",
			c.Replicas, 0, -1, int32(c.MaxMessageBytes)),
		// Rate limits (ratelimit.go): limit.<tool>, the operator's; bucket.<tool>,
		// the token bucket the workers share.
		bucket(RoleCoordinator|RoleWorker, s.LimitsBucket(), "toolfleet rate limits: limit.<tool> -> limit, bucket.<tool> -> shared token bucket",
			c.Replicas, 0, -1, protocol.MaxRateLimitBytes),
		{Roles: RoleServe, Config: jetstream.StreamConfig{
			Name:        s.RunsStream(),
			Description: "toolfleet run requests waiting for a coordinator",
			Subjects:    []string{s.RunQueues()},
			Retention:   jetstream.WorkQueuePolicy,
			Storage:     jetstream.FileStorage,
			Replicas:    c.Replicas,
			MaxAge:      c.QueuedRunMaxAge,
			MaxMsgs:     c.MaxQueuedRuns,
			MaxBytes:    -1,
			MaxMsgSize:  protocol.DefaultMaxMessageBytes,
			Discard:     jetstream.DiscardNew,
			Duplicates:  min(DuplicateWindow, c.QueuedRunMaxAge),
		}},
		bucket(RoleServe, s.RunsBucket(), "toolfleet run results: run id -> result",
			c.Replicas, c.RunResultTTL, c.RunResultsMaxBytes, int32(c.MaxRunResultBytes)),
		// Every coordinator journals its runs (serve, and run against a
		// remote server), appending under Nats-Expected-Last-Subject-Sequence.
		{Roles: RoleCoordinator, Config: jetstream.StreamConfig{
			Name:        s.JournalStream(),
			Description: "toolfleet run journals: every step of a run, appended before it takes effect",
			Subjects:    []string{s.JournalSubjects()},
			Retention:   jetstream.LimitsPolicy,
			Storage:     jetstream.FileStorage,
			Replicas:    c.Replicas,
			MaxAge:      c.JournalMaxAge,
			MaxMsgs:     -1,
			MaxBytes:    c.JournalMaxBytes,
			MaxMsgSize:  protocol.DefaultMaxMessageBytes,
			Discard:     jetstream.DiscardOld,
			Duplicates:  min(DuplicateWindow, c.JournalMaxAge),
			AllowDirect: true,
			DenyDelete:  true,
		}},
	}
	for i := range list {
		list[i].Config.Placement = placement(c.PlacementTags)
	}
	return list
}

// bucket is the stream backing a key-value bucket of history 1, as
// nats.go's CreateKeyValue configures it.
func bucket(roles Role, name, description string, replicas int, ttl time.Duration, maxBytes int64, maxValue int32) FleetStream {
	dup := 2 * time.Minute
	if ttl > 0 && ttl < dup {
		dup = ttl
	}
	return FleetStream{Roles: roles, Bucket: name, Config: jetstream.StreamConfig{
		Name:              "KV_" + name,
		Description:       description,
		Subjects:          []string{"$KV." + name + ".>"},
		Retention:         jetstream.LimitsPolicy,
		Storage:           jetstream.FileStorage,
		Replicas:          replicas,
		MaxAge:            ttl,
		MaxMsgs:           -1,
		MaxBytes:          maxBytes,
		MaxMsgsPerSubject: 1,
		MaxMsgSize:        maxValue,
		MaxConsumers:      -1,
		Discard:           jetstream.DiscardNew,
		Duplicates:        dup,
		AllowRollup:       true,
		DenyDelete:        true,
		AllowDirect:       true,
	}}
}

// StreamsOf returns the streams of list that role uses.
func StreamsOf(list []FleetStream, role Role) []FleetStream {
	var out []FleetStream
	for _, fs := range list {
		if fs.Roles&role != 0 {
			out = append(out, fs)
		}
	}
	return out
}
