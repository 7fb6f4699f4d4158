package natstest

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolfleet/toolfleet/internal/embedded"
)

// Start starts a JetStream server on a random loopback port with its store
// in t.TempDir(), and shuts it down when the test ends.
func Start(t testing.TB) *embedded.Server {
	t.Helper()
	return StartWithConfig(t, "")
}

// StartWithConfig is [Start] with nats-server configuration text (accounts,
// authorization, ...). The listener and store directory are still chosen by
// Start.
func StartWithConfig(t testing.TB, confText string) *embedded.Server {
	t.Helper()
	return start(t, embedded.Config{StoreDir: t.TempDir(), ConfigText: confText, Listen: true})
}

// Restart shuts s down (if it still runs) and starts a new server with the
// same configuration, port and store directory, so JetStream state survives
// and clients reconnect to the same URL.
func Restart(t testing.TB, s *embedded.Server) *embedded.Server {
	t.Helper()
	s.Shutdown()
	return start(t, s.Config())
}

func start(t testing.TB, cfg embedded.Config) *embedded.Server {
	t.Helper()
	s, err := embedded.Start(cfg)
	if err != nil {
		t.Fatalf("starting embedded nats-server: %v", err)
	}
	t.Cleanup(s.Shutdown)
	return s
}

// Connect opens a TCP connection to s that reconnects quickly and forever,
// and closes it when the test ends. opts are applied after the defaults.
func Connect(t testing.TB, s *embedded.Server, opts ...nats.Option) *nats.Conn {
	t.Helper()
	base := []nats.Option{
		nats.Name(t.Name()),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(50 * time.Millisecond),
		nats.ReconnectJitter(0, 0),
	}
	nc, err := nats.Connect(s.ClientURL(), append(base, opts...)...)
	if err != nil {
		t.Fatalf("connecting to embedded nats-server: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc
}
