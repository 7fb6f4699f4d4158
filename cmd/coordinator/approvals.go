package main

import (
	"context"
	"fmt"
	"io"

	"github.com/nats-io/nats.go"

	"github.com/toolfleet/toolfleet/internal/approval"
	"github.com/toolfleet/toolfleet/internal/cliconfig"
	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/procsec"
)

// envConnFlagOf names the environment variables that set the connection
// of "coordinator approvals" and "coordinator runs", which take no
// connection flags.
var envConnFlagOf = cliconfig.Flags{
	"Conn":             "env " + natsbus.EnvURL,
	"Conn.URL":         "env " + natsbus.EnvURL,
	"Conn.CredsFile":   "env " + natsbus.EnvCreds,
	"Conn.User":        "env " + natsbus.EnvUser,
	"Conn.NKeyFile":    "env " + natsbus.EnvNKey,
	"Conn.InboxPrefix": "env " + natsbus.EnvInboxPrefix,
	"Conn.auth":        "env NATS_CREDS, NATS_USER, NATS_TOKEN, NATS_NKEY",
}

// envCommand runs an operator command whose connection the environment
// alone configures (envConn, named connName): a connection setting that
// cannot work is a configuration error (exit status 2) before any
// subcommand runs.
func envCommand(ctx context.Context, name, connName string, args []string, stdout, stderr io.Writer,
	body func(context.Context, []string, io.Writer, io.Writer, func(context.Context) (*nats.Conn, error)) int) int {
	conn := envConn(connName)
	if err := conn.Validate(); err != nil {
		c := &command{name: name, flags: envConnFlagOf, stderr: stderr}
		return c.fail(nest("Conn", err))
	}
	ctx, refused, cancel := watchRefusals(ctx, name, procsec.Getenv(natsbus.EnvUser))
	defer cancel(nil)
	connect := func(ctx context.Context) (*nats.Conn, error) { return natsbus.Connect(ctx, conn, refused) }
	code := body(ctx, args, stdout, stderr, connect)
	if err := refusal(ctx); err != nil && code != exitOK {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
	}
	return code
}

// envConn is the connection of a command that takes no connection flags:
// everything from the environment, read with procsec.Getenv, which sees
// the secrets (NATS_PASSWORD, NATS_TOKEN) main took out of it.
func envConn(name string) natsbus.ConnConfig {
	return natsbus.ConnConfig{Name: name, Getenv: procsec.Getenv}
}

// approvalsCommand runs "coordinator approvals ...": list pending requests,
// approve or deny one, over NATS.
func approvalsCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return envCommand(ctx, "coordinator approvals", "toolfleet-approvals", args, stdout, stderr, approval.Command)
}
