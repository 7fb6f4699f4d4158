package main

import (
	"context"
	"io"

	"github.com/toolfleet/toolfleet/internal/runs"
)

// runsCommand runs "coordinator runs ...": list, show or cancel durable
// runs from their journals, over NATS ($NATS_URL).
func runsCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return envCommand(ctx, "coordinator runs", "toolfleet-runs", args, stdout, stderr, runs.Command)
}
