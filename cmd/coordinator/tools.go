package main

import (
	"context"
	"io"

	"github.com/toolfleet/toolfleet/internal/traffic"
)

// toolsCommand runs "coordinator tools ...": pause or resume a tool on
// every worker, see its state and the audit log of such changes, over NATS
// ($NATS_URL; the operator's credentials under deploy/nats-server.conf).
func toolsCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return envCommand(ctx, "coordinator tools", "toolfleet-tools", args, stdout, stderr, traffic.Command)
}
