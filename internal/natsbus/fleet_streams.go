package natsbus

import (
	"cmp"
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
	// Tunable are fields (by JSON name) an operator may set to another
	// value on the server: no process counts them as drift, and
	// provisioning keeps the server's value (share.go).
	Tunable []string
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
			MaxMsgsPerSubject:    cmp.Or(c.MaxCallsPerClient, DefaultMaxCallsPerClient),
			MaxBytes:             -1,
			MaxMsgSize:           int32(c.MaxMessageBytes),
			Discard:              jetstream.DiscardNew,
			DiscardNewPerSubject: true,
			Duplicates:           min(DuplicateWindow, c.CallsMaxAge),
		}, Tunable: callsTunable(cfg)},
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
			MaxMsgs:     c.ApprovalsMaxMsgs,
			MaxBytes:    c.ApprovalsMaxBytes,
			MaxMsgSize:  int32(c.MaxMessageBytes),
			// Full: refuse what is new, never forget what was
			// recorded; a request that cannot be stored is not approved.
			Discard:    jetstream.DiscardNew,
			Duplicates: min(DuplicateWindow, c.ApprovalsMaxAge),
			DenyDelete: true,
			DenyPurge:  true,
			// Workers read a decision back by its sequence (direct get).
			AllowDirect: true,
		}},
		// Traffic records (pause.go): who paused, resumed or limited
		// which tool, when and why, written by operators only, before the
		// change. It never refuses a record for want of room: a tool
		// keeps its last MaxTrafficRecords, the oldest go first, so the
		// kill switch never waits for room in the approvals stream.
		// Coordinators check it (and the embedded server's creates it).
		{Roles: RoleCoordinator, Config: jetstream.StreamConfig{
			Name:              s.TrafficStream(),
			Description:       "toolfleet traffic records: a tool's pauses, resumes and rate limits (audit log)",
			Subjects:          []string{s.TrafficNotes()},
			Retention:         jetstream.LimitsPolicy,
			Storage:           jetstream.FileStorage,
			Replicas:          c.Replicas,
			MaxAge:            c.ApprovalsMaxAge,
			MaxMsgs:           -1,
			MaxBytes:          TrafficMaxBytes,
			MaxMsgsPerSubject: MaxTrafficRecords,
			MaxMsgSize:        MaxTrafficRecordBytes,
			Discard:           jetstream.DiscardOld,
			Duplicates:        DuplicateWindow,
			DenyDelete:        true,
			DenyPurge:         true,
		}},
		noDirect(bucket(RoleCoordinator|RoleWorker, s.CatalogBucket(), "toolfleet tool catalog: tool name -> spec",
			c.Replicas, 0, -1, int32(c.MaxMessageBytes))),
		// Rate limits (ratelimit.go): limit.<tool>, the operator's; bucket.<tool>,
		// the token bucket the workers share.
		noDirect(bucket(RoleCoordinator|RoleWorker, s.LimitsBucket(), "toolfleet rate limits: limit.<tool> -> limit, bucket.<tool> -> shared token bucket",
			c.Replicas, 0, -1, protocol.MaxRateLimitBytes)),
		// Clients store their submissions here themselves
		// (<prefix>.run.submit.<client>.<agent>.<submission>, deduplicated
		// by Nats-Msg-Id, protocol.SubmissionMsgID, the agent also in
		// protocol.HeaderAgent): a run is accepted once stored, whether
		// or not a coordinator runs. The server stores each under
		// <prefix>.run.queued.<client> (its subject transform; the id
		// stays in its Nats-Msg-Id, the agent in its header), so
		// max_msgs_per_subject with discard_new_per_subject is each
		// client's share, whatever agents it names: a client over it is
		// refused, and only it. DiscardNew refuses a submission, rather
		// than dropping a queued one, when the stream is full.
		{Roles: RoleServe, Config: jetstream.StreamConfig{
			Name:                 s.RunsStream(),
			Description:          "toolfleet run submissions waiting for a coordinator",
			Subjects:             []string{s.RunSubmissions()},
			SubjectTransform:     &jetstream.SubjectTransformConfig{Source: s.RunSubmissions(), Destination: s.QueuedRuns()},
			Retention:            jetstream.WorkQueuePolicy,
			Storage:              jetstream.FileStorage,
			Replicas:             c.Replicas,
			MaxAge:               c.QueuedRunMaxAge,
			MaxMsgs:              c.MaxQueuedRuns,
			MaxBytes:             -1,
			MaxMsgsPerSubject:    cmp.Or(c.MaxQueuedRunsPerClient, DefaultMaxQueuedRunsPerClient),
			MaxMsgSize:           protocol.DefaultMaxMessageBytes,
			Discard:              jetstream.DiscardNew,
			DiscardNewPerSubject: true,
			Duplicates:           min(DuplicateWindow, c.QueuedRunMaxAge),
		}, Tunable: shareTunable(c.MaxQueuedRunsPerClient)},
		bucket(RoleServe, s.RunsBucket(), "toolfleet run results: run id -> result",
			c.Replicas, c.RunResultTTL, c.RunResultsMaxBytes, int32(c.MaxRunResultBytes)),
		// Agent definitions: written by admin or operator only, read by
		// serving coordinators; a key keeps AgentHistory revisions so a
		// resumed run reads the one it started on.
		agentsBucket(s.AgentsBucket(), c.Replicas, int32(c.MaxMessageBytes)),
		// Every coordinator journals its runs (serve, and run against a
		// remote server), appending under Nats-Expected-Last-Subject-Sequence.
		// Only runs' journals: nothing but a run's coordinator writes here.
		// Full, it refuses new entries (the run that cannot append stops)
		// rather than evict a live run's first ones: a run is never
		// resumed from a journal that lost entries.
		{Roles: RoleCoordinator, Config: jetstream.StreamConfig{
			Name:        s.JournalStream(),
			Description: "toolfleet run journals: every step of a run, appended before it takes effect",
			Subjects:    []string{s.Journals()},
			Retention:   jetstream.LimitsPolicy,
			Storage:     jetstream.FileStorage,
			Replicas:    c.Replicas,
			MaxAge:      c.JournalMaxAge,
			MaxMsgs:     -1,
			MaxBytes:    c.JournalMaxBytes,
			MaxMsgSize:  protocol.DefaultMaxMessageBytes,
			Discard:     jetstream.DiscardNew,
			Duplicates:  min(DuplicateWindow, c.JournalMaxAge),
			AllowDirect: true,
			DenyDelete:  true,
		}},
		// Cancel requests ("coordinator runs cancel"), one kept per run,
		// apart from the journals they must never crowd out.
		{Roles: RoleCoordinator, Config: jetstream.StreamConfig{
			Name:              s.CancelsStream(),
			Description:       "toolfleet run cancel requests: run id -> the last request",
			Subjects:          []string{s.JournalCancels()},
			Retention:         jetstream.LimitsPolicy,
			Storage:           jetstream.FileStorage,
			Replicas:          c.Replicas,
			MaxAge:            c.JournalMaxAge,
			MaxMsgs:           MaxCancelRequests,
			MaxBytes:          -1,
			MaxMsgsPerSubject: 1,
			MaxMsgSize:        MaxCancelRequestBytes,
			Discard:           jetstream.DiscardOld,
			Duplicates:        min(DuplicateWindow, c.JournalMaxAge),
			AllowDirect:       true,
		}},
		// The execution records of approved calls: the first worker to
		// write a call's record runs it, and the server refuses every
		// later record of it (one per subject, never replaced, never
		// evicted before the approval it guards has expired).
		// Coordinators use it for their in-process workers.
		{Roles: RoleCoordinator | RoleWorker, Config: claimsStream(s.ClaimsStream(), s.Claims(), c)},
		// The start records of non-idempotent calls (claim.go): a worker's
		// claim before it runs the call, or its coordinator's withdrawal
		// at the deadline; the first stored holds the call, the server
		// refuses every later one. Each expires (its own TTL) once no
		// worker can start the call any more; full, the stream refuses a
		// claim, and the call does not run.
		{Roles: RoleCoordinator | RoleWorker, Config: startsStream(s, c)},
	}
	// A tool with workers of its own has record streams of its own
	// (records.go): what its workers may write fills only those. Only
	// provisioning knows the list, so no process checks them (Roles 0).
	for _, tool := range c.OwnRecordTools {
		t := protocol.ToolName(tool)
		list = append(list,
			FleetStream{Config: claimsStream(s.OwnClaimsStream(t), s.OwnClaims(t), c)},
			FleetStream{Config: ownStartsStream(s, t, c)})
	}
	for i := range list {
		list[i].Config.Placement = placement(c.PlacementTags)
	}
	return list
}

// Bounds of the cancels, traffic and claims streams.
const (
	// MaxTrafficRecords bounds the traffic records kept per tool; the
	// oldest go first.
	MaxTrafficRecords = 10_000
	// TrafficMaxBytes bounds the traffic stream; the oldest records go
	// first.
	TrafficMaxBytes = 256 << 20
	// MaxTrafficRecordBytes bounds one stored traffic record.
	MaxTrafficRecordBytes = 4 << 10
	// MaxCancelRequests bounds the cancel requests kept, one per run; the
	// oldest go first.
	MaxCancelRequests = 100_000
	// MaxCancelRequestBytes bounds one stored cancel request.
	MaxCancelRequestBytes = 4 << 10
	// ClaimsMaxAge is how long an approved call's execution record is
	// kept: longer, by an hour for clocks that disagree, than the longest
	// a worker accepts an approval (MaxApprovalMaxAge), so no copy of
	// the call can run after its record expired.
	ClaimsMaxAge = MaxApprovalMaxAge + time.Hour
	// DefaultMaxClaims bounds the execution records a claims stream keeps
	// (StreamConfig.MaxClaims); once full, approved calls of its tools
	// are refused (not run) until records expire.
	DefaultMaxClaims = 1_000_000
	// MaxClaimBytes bounds one stored execution record.
	MaxClaimBytes = 4 << 10
)

// claimsStream is the expected configuration of a claims stream, the
// shared one or a tool's own.
func claimsStream(name, subjects string, c StreamConfig) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:                 name,
		Description:          "toolfleet execution records of approved calls: one per call, written before it runs",
		Subjects:             []string{subjects},
		Retention:            jetstream.LimitsPolicy,
		Storage:              jetstream.FileStorage,
		Replicas:             c.Replicas,
		MaxAge:               ClaimsMaxAge,
		MaxMsgs:              c.MaxClaims,
		MaxBytes:             -1,
		MaxMsgsPerSubject:    1,
		MaxMsgSize:           MaxClaimBytes,
		Discard:              jetstream.DiscardNew,
		DiscardNewPerSubject: true,
		Duplicates:           DuplicateWindow,
		// Workers write the records: read with STREAM.MSG.GET (see
		// noDirect).
		AllowDirect: false,
		DenyDelete:  true,
		DenyPurge:   true,
	}
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

// noDirect turns direct gets off for fs, a stream whose content workers
// write: nats.go then reads it with STREAM.MSG.GET, and the server answers
// no direct get of it, whoever asks. The server sends a direct get's
// answer on whatever reply subject the requester named, with its own
// authority, and a stream capturing that subject stores it; asked with
// {"no_hdr":true}, the answer is the stored payload alone, which nothing
// tells from a publish. A STREAM.MSG.GET answer is a JSON envelope that
// no fleet decoder takes, so a reflected copy of it is harmless.
func noDirect(fs FleetStream) FleetStream {
	fs.Config.AllowDirect = false
	return fs
}

// AgentHistory is how many revisions of each agent the agents bucket keeps
// (the most a key-value bucket can): a run resumed after its agent was
// changed this many times more can no longer read the revision it started
// on, and fails rather than run on another.
const AgentHistory = 64

// agentsBucket is the bucket of agent definitions: a bucket of history
// AgentHistory, as nats.go's CreateKeyValue configures it.
func agentsBucket(name string, replicas int, maxValue int32) FleetStream {
	fs := bucket(RoleServe, name, "toolfleet agents: agent name -> definition (revision = version)", replicas, 0, -1, maxValue)
	fs.Config.MaxMsgsPerSubject = AgentHistory
	return fs
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
