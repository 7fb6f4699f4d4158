package main

import (
	"context"
	"io"

	"github.com/nats-io/nats.go"

	"github.com/toolfleet/toolfleet/internal/agents"
	"github.com/toolfleet/toolfleet/internal/procsec"
)

// agentsCommand runs "coordinator agents ...": put, get, list or remove
// the fleet's agent definitions, over NATS ($NATS_URL).
func agentsCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	lookup := func(name string) (string, bool) { v := procsec.Getenv(name); return v, v != "" }
	return envCommand(ctx, "coordinator agents", "toolfleet-agents", args, stdout, stderr,
		func(ctx context.Context, args []string, stdout, stderr io.Writer, conn func(context.Context) (*nats.Conn, error)) int {
			return agents.Command(ctx, args, stdout, stderr, conn, lookup)
		})
}
