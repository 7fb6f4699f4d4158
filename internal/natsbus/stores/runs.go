package stores

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natsbus/streammsg"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// RunResults is the runs bucket: one stored result per run, under its
// [protocol.RunKey].
type RunResults struct {
	kv jetstream.KeyValue
}

// OpenRunResults returns the runs bucket of subjects, which must exist
// ([ProvisionStreams] or [CreateMissingStreams] with the serve role
// creates it). It asks again while the cluster does not answer (a leader
// being elected), 5s an attempt, for up to 30s ([OpenBucket]).
func OpenRunResults(ctx context.Context, js natsbus.JetStream, subjects protocol.Subjects) (*RunResults, error) {
	kv, err := OpenBucket(ctx, js, subjects.RunsBucket(), KeyWatchConfig{})
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("%w: %w", ErrNoRunsBucket, err)
	}
	if err != nil {
		return nil, err
	}
	return &RunResults{kv: kv}, nil
}

// Has reports whether key has a result. A failure to read counts as no.
func (r *RunResults) Has(ctx context.Context, key string) bool {
	_, err := r.kv.Get(ctx, key)
	return err == nil
}

// Create stores data under key unless a result is there already; created
// says whether this call stored it. A key that already holds exactly data
// counts as stored by this call: an earlier attempt of the caller's whose
// answer was lost (a leader lost after storing it) stored it, and a caller
// that asks again is never told its own result is another's.
func (r *RunResults) Create(ctx context.Context, key string, data []byte) (created bool, err error) {
	_, err = r.kv.Create(ctx, key, data)
	switch {
	case err == nil:
		return true, nil
	case !errors.Is(err, jetstream.ErrKeyExists):
		return false, err
	}
	held, _, err := r.Entry(ctx, key)
	if err != nil {
		return false, fmt.Errorf("reading the value that is there: %w", err)
	}
	return bytes.Equal(held, data), nil
}

// Entry returns the value under key and its revision: [ErrNoResult] when
// there is none.
func (r *RunResults) Entry(ctx context.Context, key string) ([]byte, uint64, error) {
	e, err := r.kv.Get(ctx, key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return nil, 0, ErrNoResult
	case err != nil:
		return nil, 0, err
	}
	return e.Value(), e.Revision(), nil
}

// Replace stores data under key in place of the value at revision rev;
// it fails when another write came since.
func (r *RunResults) Replace(ctx context.Context, key string, data []byte, rev uint64) error {
	_, err := r.kv.Update(ctx, key, data, rev)
	return err
}

// RunsConsumerConfig is what a serving coordinator sets on the runs
// stream's shared consumer.
type RunsConsumerConfig struct {
	// AckWait is how long a taken run request stays with its coordinator
	// without a heartbeat.
	AckWait time.Duration
	// MaxDeliver bounds how often a run request is taken.
	MaxDeliver int
}

// runsConsumer is the durable pull consumer every serving coordinator
// shares: of every submission, as the stream's transform stores it and as
// it was stored before, under the former transform or none
// (protocol.Subjects.ParseStoredSubmission).
func runsConsumer(s protocol.Subjects, c RunsConsumerConfig) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:        s.RunsConsumer(),
		Description:    "toolfleet coordinators serving runs",
		FilterSubjects: []string{s.RunsQueued(), s.RunSubmissions()},
		DeliverPolicy:  jetstream.DeliverAllPolicy,
		AckPolicy:      jetstream.AckExplicitPolicy,
		AckWait:        c.AckWait,
		MaxDeliver:     c.MaxDeliver,
		MaxAckPending:  10_000,
		MaxWaiting:     4096,
	}
}

// EnsureRunsConsumer creates or updates the runs stream's shared consumer.
// It asks again while the cluster does not answer or answers "not now"
// (a leader being elected after a node was lost), 5s an attempt, for up to
// DefaultStreamStartWait, so that a coordinator started in that window
// starts instead of exiting.
func EnsureRunsConsumer(ctx context.Context, js natsbus.JetStream, subjects protocol.Subjects, cfg RunsConsumerConfig) (natsbus.Consumer, error) {
	return natsbus.AskRetrying(ctx, nil, func(ctx context.Context) (natsbus.Consumer, error) {
		return js.CreateOrUpdateConsumer(ctx, subjects.RunsStream(), runsConsumer(subjects, cfg))
	})
}

// RunsStream returns the runs stream, to read a stored run request by
// sequence ([streammsg.Get]).
func RunsStream(ctx context.Context, js natsbus.JetStream, subjects protocol.Subjects) (streammsg.Stream, error) {
	return js.Stream(ctx, subjects.RunsStream())
}

// JournalStreamConfig is the stream of run journals, one subject per run
// (<prefix>.journal.run.<run>) plus operators' cancel requests
// (<prefix>.journal.cancel.<run>), as [FleetStreams] lists it.
func JournalStreamConfig(s protocol.Subjects) jetstream.StreamConfig {
	for _, fs := range natsbus.FleetStreams(s, natsbus.StreamConfig{}) {
		if fs.Config.Name == s.JournalStream() {
			return fs.Config
		}
	}
	panic("natsbus.FleetStreams lists no journal stream")
}

// ErrNoRunsBucket is returned by [OpenRunResults] when the runs bucket
// does not exist (yet: no serving coordinator has started, and nobody
// provisioned the fleet).
var ErrNoRunsBucket = errors.New("the runs bucket does not exist")

// ErrNoResult is returned by [RunResults.Entry] when key has no result.
var ErrNoResult = errors.New("no result stored")

// SubmitRun stores msg, a submission on its subject
// ([protocol.Subjects.RunSubmission]) with its dedup id, in the runs
// stream, and reports whether the server already held it (a duplicate).
func SubmitRun(ctx context.Context, js natsbus.JetStream, msg *nats.Msg) (duplicate bool, err error) {
	ack, err := js.PublishMsg(ctx, msg)
	if err != nil {
		return false, err
	}
	return ack.Duplicate, nil
}
