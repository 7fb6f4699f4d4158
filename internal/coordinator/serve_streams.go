package coordinator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// runsStreamConfig is the work-queue stream of accepted run requests.
func runsStreamConfig(s protocol.Subjects, c ServeConfig) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        s.RunsStream(),
		Description: "toolfleet run requests waiting for a coordinator",
		Subjects:    []string{s.RunQueues()},
		Retention:   jetstream.WorkQueuePolicy,
		Storage:     jetstream.FileStorage,
		Replicas:    c.Replicas,
		MaxAge:      c.QueuedRunMaxAge,
		MaxMsgs:     c.MaxQueuedRuns,
		MaxBytes:    -1,
		MaxMsgSize:  runsMaxMsgSize,
		Discard:     jetstream.DiscardNew,
		Duplicates:  runsDuplicateWindow,
	}
}

// runsConsumerConfig is the durable pull consumer every serving
// coordinator shares.
func runsConsumerConfig(s protocol.Subjects, c ServeConfig) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       s.RunsConsumer(),
		Description:   "toolfleet coordinators serving runs",
		FilterSubject: s.RunQueues(),
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       c.AckWait,
		MaxDeliver:    c.MaxDeliver,
		MaxAckPending: 10_000,
		MaxWaiting:    4096,
	}
}

// JournalStreamConfig is the stream of run journals, one subject per run
// (<prefix>.journal.run.<run>) plus operators' cancel requests
// (<prefix>.journal.cancel.<run>). It is one more of the streams the fleet
// uses: provision and permission it like the runs stream.
func JournalStreamConfig(s protocol.Subjects, c ServeConfig) jetstream.StreamConfig {
	c = c.withDefaults()
	return jetstream.StreamConfig{
		Name:        s.JournalStream(),
		Description: "toolfleet run journals: every step of a run, appended before it takes effect",
		Subjects:    []string{s.JournalSubjects()},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		Replicas:    c.Replicas,
		MaxAge:      c.JournalMaxAge,
		MaxMsgs:     -1,
		MaxBytes:    c.JournalMaxBytes,
		MaxMsgSize:  runsMaxMsgSize,
		Discard:     jetstream.DiscardOld,
		Duplicates:  runsDuplicateWindow,
		AllowDirect: true,
		DenyDelete:  true,
	}
}

// runsBucketConfig is the KV bucket of run results.
func runsBucketConfig(s protocol.Subjects, c ServeConfig) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket:       s.RunsBucket(),
		Description:  "toolfleet run results: run id -> result",
		History:      1,
		TTL:          c.ResultTTL,
		MaxBytes:     c.ResultsMaxBytes,
		MaxValueSize: int32(c.MaxResultBytes),
		Storage:      jetstream.FileStorage,
		Replicas:     c.Replicas,
	}
}

// ensureRuns creates or updates the runs stream, its consumer, the journal
// stream and the runs bucket. It is idempotent and safe to run from several coordinators at
// once.
func ensureRuns(ctx context.Context, js jetstream.JetStream, s protocol.Subjects, c ServeConfig) (jetstream.Consumer, jetstream.KeyValue, error) {
	sc := runsStreamConfig(s, c)
	if err := retryExists(ctx, func() error {
		_, err := natsbus.CreateOrUpdateStream(ctx, js, sc)
		return err
	}); err != nil {
		return nil, nil, fmt.Errorf("coordinator: stream %s: %w", sc.Name, err)
	}
	jc := JournalStreamConfig(s, c)
	if err := retryExists(ctx, func() error {
		_, err := natsbus.CreateOrUpdateStream(ctx, js, jc)
		return err
	}); err != nil {
		return nil, nil, fmt.Errorf("coordinator: stream %s: %w", jc.Name, err)
	}
	kc := runsBucketConfig(s, c)
	var kv jetstream.KeyValue
	if err := retryExists(ctx, func() (err error) {
		kv, err = natsbus.CreateOrUpdateKeyValue(ctx, js, kc)
		return err
	}); err != nil {
		return nil, nil, fmt.Errorf("coordinator: bucket %s: %w", kc.Bucket, err)
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, sc.Name, runsConsumerConfig(s, c))
	if err != nil {
		return nil, nil, fmt.Errorf("coordinator: consumer %s on %s: %w", s.RunsConsumer(), sc.Name, err)
	}
	return cons, kv, nil
}

// retryExists retries a create-or-update when another process created the
// same stream between our update and our create.
func retryExists(ctx context.Context, f func() error) error {
	var err error
	for range 5 {
		if err = f(); !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
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
