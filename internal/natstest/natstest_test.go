package natstest_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/natstest"
)

func TestRestartKeepsPortAndStreams(t *testing.T) {
	s := natstest.Start(t)
	url := s.ClientURL()
	nc := natstest.Connect(t, s)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}}); err != nil {
		t.Fatalf("CreateStream: %v", err)
	}
	if _, err := js.Publish(ctx, "s.one", []byte("x")); err != nil {
		t.Fatalf("Publish: %v", err)
	}

	s2 := natstest.Restart(t, s)
	if got := s2.ClientURL(); got != url {
		t.Fatalf("ClientURL after restart = %q, want %q", got, url)
	}
	// The old connection reconnects and sees the stored message. (A
	// restart recovers the store; on a loaded machine that takes seconds.)
	natstest.WaitFor(t, 30*time.Second, func() error {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		str, err := js.Stream(ctx, "S")
		if err != nil {
			return err
		}
		info, err := str.Info(ctx)
		if err != nil {
			return err
		}
		if info.State.Msgs != 1 {
			return fmt.Errorf("stream S has %d messages, want 1", info.State.Msgs)
		}
		return nil
	})
}

func TestStartWithConfigAppliesAuthorization(t *testing.T) {
	s := natstest.StartWithConfig(t, `authorization { token: "s3cret" }`)
	if _, err := natsConnect(s.ClientURL(), ""); err == nil {
		t.Fatal("connect without the token succeeded, want an authorization error")
	}
	nc, err := natsConnect(s.ClientURL(), "s3cret")
	if err != nil {
		t.Fatalf("connect with the token: %v", err)
	}
	nc.Close()
}

func TestShutdownIsIdempotent(t *testing.T) {
	s := natstest.Start(t)
	s.Shutdown()
	s.Shutdown()
	if s.NATSServer().Running() {
		t.Fatal("server still running after Shutdown")
	}
}
