package natstest_test

import "github.com/nats-io/nats.go"

func natsConnect(url, token string) (*nats.Conn, error) {
	opts := []nats.Option{nats.MaxReconnects(0)}
	if token != "" {
		opts = append(opts, nats.Token(token))
	}
	return nats.Connect(url, opts...)
}
