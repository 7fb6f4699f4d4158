package natsbus

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// PublishAttemptTimeout bounds one attempt of a JetStream publish. A
// request written to a connection whose server just died is never
// answered; a new attempt with the same Nats-Msg-Id is stored at most once.
const PublishAttemptTimeout = time.Second

// JetStream's answers that say "not now" rather than "no": a cluster
// electing a leader, a stream leader that moved, a publish with the same
// Nats-Msg-Id still being stored (an earlier attempt that timed out), an
// expected-sequence check the new leader cannot make yet, a stream offline
// while a restarted node catches up.
const (
	errCodeClusterNotAvailable jetstream.ErrorCode = 10008
	errCodeNotLeader           jetstream.ErrorCode = 10009
	errCodeDuplicateInProcess  jetstream.ErrorCode = 10158
	errCodeLastSeqNotReadyYet  jetstream.ErrorCode = 10163
	errCodeStreamOffline       jetstream.ErrorCode = 10118 // a replica catching up after its node restarted
)

// Transient reports whether a failed JetStream operation may succeed when
// retried: it got no answer (timeout, no responders, connection lost for
// now), or an answer that says "not now" (a leader change in a cluster).
// Any other answer from the server, such as a full stream, is final, and
// so are a connection closed for good and a tool's consumer that is not
// one the worker may serve (a push consumer, or one it may not change
// with another ack wait).
func Transient(err error) bool {
	if errors.Is(err, nats.ErrConnectionClosed) || errors.Is(err, nats.ErrConnectionDraining) ||
		errors.Is(err, ErrForeignConsumer) || errors.Is(err, ErrProvisionedAckWait) {
		return false
	}
	var api *jetstream.APIError
	if !errors.As(err, &api) {
		return true
	}
	switch api.ErrorCode {
	case errCodeClusterNotAvailable, errCodeNotLeader, errCodeDuplicateInProcess, errCodeLastSeqNotReadyYet, errCodeStreamOffline:
		return true
	}
	return false
}

// PublishRetrying publishes msg, which must carry a Nats-Msg-Id, retrying
// transient failures until ctx ends, and returns the server's PubAck.
func PublishRetrying(ctx context.Context, js jetstream.JetStream, msg *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, PublishAttemptTimeout)
		ack, err := js.PublishMsg(actx, msg, opts...)
		cancel()
		if err == nil || ctx.Err() != nil || !Transient(err) {
			return ack, err
		}
		if !SleepCtx(ctx, Backoff(attempt)) {
			return nil, err
		}
	}
}

// AskRetrying calls ask, a request to the cluster that changes nothing or
// may be repeated, each attempt bounded by DefaultKeyWatchMake (an answer
// lost with a node is asked again, never waited on), asking again while it
// fails transiently, for up to DefaultStreamStartWait: what a leader
// election takes on a loaded machine. final, when set, says which errors
// are answers, not failures (a key the bucket does not hold).
func AskRetrying[T any](ctx context.Context, final func(error) bool, ask func(context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, DefaultStreamStartWait)
	defer cancel()
	for attempt := 1; ; attempt++ {
		actx, cancelAttempt := context.WithTimeout(ctx, DefaultKeyWatchMake)
		v, err := ask(actx)
		cancelAttempt()
		if err == nil || (final != nil && final(err)) || !Transient(err) || !SleepCtx(ctx, Backoff(attempt)) {
			return v, err
		}
	}
}

// Backoff is the pause after the n-th consecutive failure.
func Backoff(n int) time.Duration { return min(time.Duration(n)*50*time.Millisecond, 2*time.Second) }

// SleepCtx waits d or until ctx ends; it reports whether d passed.
func SleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// DefaultKeyWatchMake bounds one attempt of [AskRetrying], and is the
// default of the stores' KeyWatchConfig.MakeTimeout (making a bucket's
// watcher).
const DefaultKeyWatchMake = 5 * time.Second
