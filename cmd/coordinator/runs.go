package main

import (
	"context"
	"io"
	"os"

	"github.com/nats-io/nats.go"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/runs"
)

// runsCommand runs "coordinator runs ...": list, show or cancel durable
// runs from their journals, over NATS ($NATS_URL).
func runsCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	connect := func(ctx context.Context) (*nats.Conn, error) {
		return natsbus.Connect(ctx, natsbus.ConnConfig{URL: os.Getenv("NATS_URL"), Name: "toolfleet-runs"})
	}
	return runs.Command(ctx, args, stdout, stderr, connect)
}
