package main

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"
)

// The floor with fast batches: the floor's rounds with a round's calls
// published as one fast-ingest batch (ADR-50, nats-server 2.14, API level
// 4) instead of one asynchronous publish each. Every call keeps its
// Nats-Msg-Id, which the server still deduplicates in a fast batch; the
// batch is "gap: fail", so the server stores its messages in order and
// without a gap or abandons it, and the requester waits for the commit's
// one PubAck, which stands for every call of the round. Workers are the
// floor's: a call is acknowledged on its result's PubAck.
//
// What it cannot give that an asynchronous publish gives: the stream
// sequence of each call (the commit's PubAck names the last one only, and
// a fast batch is not atomic, so other publishers' messages may be stored
// between its calls). The fleet withdraws an unanswered non-idempotent
// call at the sequence its PubAck gave.
//
// The client is orbit.go's jetstreamext.FastPublisher: one per batch, not
// safe for concurrent use. Its first message waits for the server's first
// flow acknowledgement, and its commit for the PubAck: a fast batch is
// two round trips where asynchronous publishes overlap into one.

// newFloorFastBatch starts a fast batch whose waits are bounded by timeout.
func newFloorFastBatch(js jetstream.JetStream, timeout time.Duration) (jetstreamext.FastPublisher, error) {
	fp, err := jetstreamext.NewFastPublisher(js, jetstreamext.FastPublishFlowControl{AckTimeout: timeout})
	if err != nil {
		return nil, fmt.Errorf("floor fast batch: %w", err)
	}
	return fp, nil
}

// addFast adds m to the batch, committing it when last.
func addFast(fp jetstreamext.FastPublisher, m *nats.Msg, last bool, timeout time.Duration) error {
	if !last {
		if _, err := fp.AddMsg(m); err != nil {
			return fmt.Errorf("floor fast batch: %w", err)
		}
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if _, err := fp.CommitMsg(ctx, m); err != nil {
		return fmt.Errorf("floor fast batch commit: %w", err)
	}
	return nil
}
