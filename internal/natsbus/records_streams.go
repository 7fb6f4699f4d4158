package natsbus

import (
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/pkg/protocol"
)

const (
	// DefaultStartsMaxBytes bounds a starts stream
	// (StreamConfig.StartsMaxBytes). Full, it refuses new records
	// (discard new): a claim is refused and the call does not run, and is
	// withdrawn or answered outcome_unknown at its deadline. A record
	// takes about 250 bytes and lives the stream's MaxAge (the calls
	// stream's plus an hour: 2h by default), so 1 GiB holds the records
	// of about 600 non-idempotent calls a second, sustained.
	DefaultStartsMaxBytes = 1 << 30

	// MaxStartBytes bounds one stored start record, headers included.
	MaxStartBytes = 1 << 10

	// StartsAfterCalls is how much longer than the calls stream's MaxAge
	// the starts stream keeps a record at most.
	StartsAfterCalls = time.Hour
)

// startsStream is the expected configuration of the starts stream.
func startsStream(s protocol.Subjects, c StreamConfig) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:                 s.StartsStream(),
		Description:          "toolfleet start records of non-idempotent calls: a worker's claim or the coordinator's withdrawal, one per call",
		Subjects:             []string{s.Starts()},
		Retention:            jetstream.LimitsPolicy,
		Storage:              jetstream.FileStorage,
		Replicas:             c.Replicas,
		MaxAge:               c.CallsMaxAge + StartsAfterCalls,
		MaxMsgs:              -1,
		MaxBytes:             c.StartsMaxBytes,
		MaxMsgsPerSubject:    1,
		MaxMsgSize:           MaxStartBytes,
		Discard:              jetstream.DiscardNew,
		DiscardNewPerSubject: true,
		Duplicates:           DuplicateWindow,
		// No per-message TTL (AllowMsgTTL false): the server refuses a
		// record with Nats-TTL, so none outlives MaxAge.
		// Workers write the records: read with STREAM.MSG.GET (see
		// noDirect).
		AllowDirect: false,
		DenyDelete:  true,
	}
}

// ownStartsStream is the expected configuration of a tool's own starts
// stream: the shared one's, on the tool's own subjects.
func ownStartsStream(s protocol.Subjects, tool protocol.ToolName, c StreamConfig) jetstream.StreamConfig {
	cfg := startsStream(s, c)
	cfg.Name = s.OwnStartsStream(tool)
	cfg.Subjects = []string{s.OwnStarts(tool)}
	return cfg
}

// MaxApprovalMaxAge bounds WorkerConfig.ApprovalMaxAge: an approved call's
// execution record (ClaimsMaxAge) must outlive every call its approval
// admits.
const MaxApprovalMaxAge = 24 * time.Hour
