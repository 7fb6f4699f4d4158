package main

import (
	"context"
	"io"
	"os"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/runs"
)

// runsCommand runs "coordinator runs ...": list, show or cancel durable
// runs from their journals, over NATS ($NATS_URL).
func runsCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	conn := natsbus.ConnConfig{URL: os.Getenv(natsbus.EnvURL), Name: "toolfleet-runs"}
	return envCommand(ctx, "coordinator runs", conn, args, stdout, stderr, runs.Command)
}
