package natstest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// attempt bounds one JetStream API request of the helpers below: a request
// whose answer is lost with a node is asked again rather than waited on.
const attempt = 5 * time.Second

// StreamInfo returns stream's info, asking until a leader of the stream
// answers (after a node kill or a restart it has none for a while). It
// fails the test, saying what it waited for, if none answers within
// timeout.
func StreamInfo(t testing.TB, js jetstream.JetStream, stream string, timeout time.Duration) *jetstream.StreamInfo {
	t.Helper()
	var info *jetstream.StreamInfo
	WaitFor(t, timeout, func() error {
		ctx, cancel := context.WithTimeout(t.Context(), attempt)
		defer cancel()
		st, err := js.Stream(ctx, stream)
		if err == nil {
			info, err = st.Info(ctx)
		}
		if err != nil {
			return fmt.Errorf("waiting for stream %s to answer (a leader): %w", stream, err)
		}
		return nil
	})
	return info
}

// ConsumerInfo returns the info of stream's consumer, asking until the
// consumer's leader answers, as [StreamInfo] does. A consumer that does
// not exist fails the test at once.
func ConsumerInfo(t testing.TB, js jetstream.JetStream, stream, consumer string, timeout time.Duration) *jetstream.ConsumerInfo {
	t.Helper()
	var info *jetstream.ConsumerInfo
	var missing error
	WaitFor(t, timeout, func() error {
		ctx, cancel := context.WithTimeout(t.Context(), attempt)
		defer cancel()
		c, err := js.Consumer(ctx, stream, consumer)
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			missing = err
			return nil
		}
		if err == nil {
			info, err = c.Info(ctx)
		}
		if err != nil {
			return fmt.Errorf("waiting for consumer %s of stream %s to answer (a leader): %w", consumer, stream, err)
		}
		return nil
	})
	if missing != nil {
		t.Fatalf("consumer %s of stream %s: %v", consumer, stream, missing)
	}
	return info
}

// WaitStreamsCurrent waits until each of streams has a leader and every
// replica of it is current: after a restarted node has caught up, so that
// another node can be lost without a stream losing its quorum.
func WaitStreamsCurrent(t testing.TB, js jetstream.JetStream, timeout time.Duration, streams ...string) {
	t.Helper()
	WaitFor(t, timeout, func() error {
		for _, name := range streams {
			ctx, cancel := context.WithTimeout(t.Context(), attempt)
			st, err := js.Stream(ctx, name)
			var info *jetstream.StreamInfo
			if err == nil {
				info, err = st.Info(ctx)
			}
			cancel()
			switch {
			case err != nil:
				return fmt.Errorf("waiting for stream %s to answer (a leader): %w", name, err)
			case info.Cluster == nil || info.Cluster.Leader == "":
				return fmt.Errorf("waiting for stream %s to have a leader", name)
			}
			for _, r := range info.Cluster.Replicas {
				if !r.Current || r.Offline {
					return fmt.Errorf("waiting for replica %s of stream %s to be current", r.Name, name)
				}
			}
		}
		return nil
	})
}

// StepDownStream asks stream's leader to step down
// ($JS.API.STREAM.LEADER.STEPDOWN.<stream>, as "nats stream cluster
// step-down" does), asking again until a leader answers that it did: its
// followers then elect a new one. It fails the test, saying what it asked
// for, if no leader agrees within timeout.
func StepDownStream(t testing.TB, js jetstream.JetStream, stream string, timeout time.Duration) {
	t.Helper()
	WaitFor(t, timeout, func() error {
		msg, err := js.Conn().Request("$JS.API.STREAM.LEADER.STEPDOWN."+stream, nil, attempt)
		if err != nil {
			return fmt.Errorf("asking stream %s's leader to step down: %w", stream, err)
		}
		var resp struct {
			Success bool `json:"success"`
			Error   *struct {
				Description string `json:"description"`
			} `json:"error"`
		}
		switch err := json.Unmarshal(msg.Data, &resp); {
		case err != nil:
			return fmt.Errorf("asking stream %s's leader to step down: the answer: %w", stream, err)
		case resp.Error != nil:
			return fmt.Errorf("asking stream %s's leader to step down: %s", stream, resp.Error.Description)
		case !resp.Success:
			return fmt.Errorf("asking stream %s's leader to step down: not done", stream)
		}
		return nil
	})
}
