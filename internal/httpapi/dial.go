package httpapi

import (
	"context"

	"github.com/nats-io/nats.go"

	"github.com/toolfleet/toolfleet/internal/natsbus"
)

// NATSDialer returns the Dialer of a server on conn's NATS: each session
// connects with conn's URL and JetStream domain as its own user, with the
// inbox prefix _INBOX_<user>, and takes nothing from the environment (no
// NATS_PASSWORD, no NATS_CREDS: a login has only the credentials it was
// given).
func NATSDialer(conn natsbus.ConnConfig) Dialer {
	url, domain := conn.URL, conn.JSDomain
	return func(ctx context.Context, user, password string, opts ...nats.Option) (*nats.Conn, error) {
		return natsbus.Connect(ctx, natsbus.ConnConfig{URL: url, JSDomain: domain, Name: "toolfleet-console",
			User: user, Password: password, InboxPrefix: "_INBOX_" + user, Logger: conn.Logger,
			Getenv: func(string) string { return "" }}, opts...)
	}
}
