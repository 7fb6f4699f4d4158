package main

import (
	"context"
	"io"
	"os"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/procsec"
	"github.com/toolfleet/toolfleet/internal/traffic"
)

// toolsCommand runs "coordinator tools ...": pause or resume a tool on
// every worker, see its state and the audit log of such changes, over NATS
// ($NATS_URL; the operator's credentials under deploy/nats-server.conf).
func toolsCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	conn := natsbus.ConnConfig{URL: os.Getenv(natsbus.EnvURL), Name: "toolfleet-tools", Getenv: procsec.Getenv}
	return envCommand(ctx, "coordinator tools", conn, args, stdout, stderr, traffic.Command)
}
