package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/toolfleet/toolfleet/internal/cliconfig"
	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natsbus/workerbus"
	"github.com/toolfleet/toolfleet/internal/procsec"
	"github.com/toolfleet/toolfleet/pkg/protocol"
	"github.com/toolfleet/toolfleet/pkg/serve"
)

// provisionFlags are the flags of "coordinator provision".
type provisionFlags struct {
	connFlags
	resultTTL     time.Duration
	timeout       time.Duration
	toolConsumers string
	replicas      int
	placementTags string
	maxPerClient  int64
	maxQueuedPer  int64
}

// provisionFlagOf names the flags of the fields "coordinator provision"
// sets.
var provisionFlagOf = connFlagOf.With(cliconfig.Flags{
	"ResultTTL":     "--result-ttl",
	"Replicas":      "--replicas",
	"PlacementTags": "--placement-tags",
	// natsbus.StreamConfig's
	"MaxCallsPerClient":      "--max-calls-per-client",
	"MaxQueuedRunsPerClient": "--max-queued-runs-per-client",
})

// provisionCommand creates or updates every stream and bucket of the fleet
// (natsbus.FleetStreams) with an identity allowed to, and prints what it
// did, one line per stream.
func provisionCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var f provisionFlags
	fs := newFlagSet("coordinator provision", stderr)
	f.connFlags.register(fs, false)
	fs.DurationVar(&f.resultTTL, "result-ttl", serve.DefaultResultTTL, "how long results stay in the runs bucket (the serving coordinators' --result-ttl)")
	fs.DurationVar(&f.timeout, "timeout", 30*time.Second, "how long to wait for NATS and JetStream")
	fs.IntVar(&f.replicas, "replicas", 1, "copies of every stream and bucket: 1 on a single server, 3 on a JetStream cluster of three or more nodes (raised on an existing stream, never lowered)")
	fs.StringVar(&f.placementTags, "placement-tags", "", "comma list of tags: every stream and bucket is placed on JetStream servers that carry all of them (nats-server server_tags, e.g. ssd,az:eu-1a); a stream placed otherwise is moved")
	fs.Int64Var(&f.maxPerClient, "max-calls-per-client", 0, "each client's share of a tool: the calls of one client, tool and class FLEET_CALLS holds at most, queued or running (its max_msgs_per_subject); more wait in their coordinator (default: keep the stream's, 1000 for a new stream)")
	fs.Int64Var(&f.maxQueuedPer, "max-queued-runs-per-client", 0, "each client's share of the runs queue: the submissions of one client for one agent FLEET_RUNS holds at most, queued or running (its max_msgs_per_subject); the server refuses that client's next ones, and only its (default: keep the stream's, 1000 for a new stream)")
	fs.StringVar(&f.toolConsumers, "tool-consumer", "", "comma list of tools whose workers have credentials of their own: their consumers are created now, so that no other consumer can cover their calls, and their execution and start records get streams of their own (FLEET_CLAIMS_<tool>, FLEET_STARTS_<tool>), which only their workers fill")
	cmd := &command{name: "coordinator provision", fs: fs, flags: provisionFlagOf, stderr: stderr,
		usage: `[flags]

Creates every stream and key-value bucket the fleet uses, or updates one
whose configuration differs, and prints what it did. It is idempotent. Run
it with the provisioning (admin) identity: under deploy/nats-server.conf no
other user may create or change a stream, and every fleet process refuses
to serve while a stream differs from this configuration.

Flags:`}
	_, set, code, done := cmd.parse(args, nil)
	if done {
		return code
	}
	if f.replicas != 1 && f.replicas != 3 {
		return cmd.fail(&usageError{fmt.Sprintf("--replicas must be 1 or 3, got %d", f.replicas)})
	}
	if err := refuseZero(fs, set, "result-ttl", "timeout"); err != nil {
		return cmd.fail(err)
	}
	sc := serve.Config{ResultTTL: f.resultTTL, Replicas: f.replicas}
	if err := sc.Validate(); err != nil {
		return cmd.fail(err)
	}
	subjects, err := protocol.NewSubjects(f.prefix)
	if err != nil {
		return cmd.fail(&usageError{fmt.Sprintf("--prefix: %v", err)})
	}
	if err := f.conn().Validate(); err != nil {
		return cmd.fail(nest("Conn", err))
	}
	// The runs stream and bucket as a serving coordinator with the same
	// settings expects them (zero fields: the defaults both use).
	streams := natsbus.StreamConfig{Replicas: f.replicas, RunResultTTL: f.resultTTL}
	streams.PlacementTags = splitList(f.placementTags)
	streams.MaxCallsPerClient = f.maxPerClient
	streams.MaxQueuedRunsPerClient = f.maxQueuedPer
	streams.OwnRecordTools = splitList(f.toolConsumers)
	if err := streams.Validate(); err != nil {
		return cmd.fail(err)
	}
	cctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	conn := f.conn()
	conn.Name = "toolfleet-provision"
	cctx, refused, stop := watchRefusals(cctx, "coordinator provision", cmp.Or(conn.User, procsec.Getenv(natsbus.EnvUser)))
	defer stop(nil)
	nc, err := natsbus.Connect(cctx, conn, refused)
	if err != nil {
		return cmd.fail(nest("Conn", err))
	}
	defer nc.Close()
	js, err := natsbus.NewJetStream(nc, conn.Domain())
	if err != nil {
		return cmd.fail(err)
	}
	actions, err := natsbus.Provision(cctx, js, subjects, streams)
	if err == nil {
		var more []natsbus.ProvisionAction
		more, err = workerbus.ProvisionToolConsumers(cctx, js, subjects, splitList(f.toolConsumers))
		actions = append(actions, more...)
	}
	for _, a := range actions {
		line := a.Action + " " + a.Stream
		if a.Bucket != "" {
			line += " (bucket " + a.Bucket + ")"
		}
		if len(a.Fields) > 0 {
			line += ": " + strings.Join(a.Fields, ", ")
		}
		fmt.Fprintln(stdout, line)
	}
	if err != nil {
		if r := refusal(cctx); r != nil {
			err = r // not the deadline it caused: the user it needs
		}
		return cmd.fail(err)
	}
	return exitOK
}
