package main

import (
	"context"
	"io"
	"os"

	"github.com/nats-io/nats.go"

	"github.com/toolfleet/toolfleet/internal/approval"
	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/procsec"
)

// approvalsCommand runs "coordinator approvals ...": list pending requests,
// approve or deny one, over NATS.
func approvalsCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	connect := func(ctx context.Context) (*nats.Conn, error) {
		return natsbus.Connect(ctx, natsbus.ConnConfig{URL: os.Getenv("NATS_URL"), Name: "toolfleet-approvals", Getenv: procsec.Getenv})
	}
	return approval.Command(ctx, args, stdout, stderr, connect)
}
