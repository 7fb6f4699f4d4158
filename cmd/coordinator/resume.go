package main

import (
	"context"
	"flag"
	"io"

	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/internal/coordinator"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// resumeCommand runs "coordinator resume RUN": it continues a run of
// "coordinator run --nats-url" whose process was killed, from its journal,
// with the same fleet flags, and prints its result as run does.
func resumeCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var f runFlags
	fs := newRunFlagSet(&f, stderr)
	fs.Init("coordinator resume", flag.ContinueOnError)
	cmd := &command{name: "coordinator resume", fs: fs, flags: fleetFlagOf, stderr: stderr,
		usage: `[flags] RUN

Continues a run of "coordinator run --nats-url" from its journal (FLEET_JOURNAL):
the model is not asked again for a journaled round, a call whose result is
stored is not run again. Give it the flags the run had (model, limits).`,
		exits: exitsRun}
	var run protocol.RunID
	_, set, code, done := cmd.parse(args, func(pos []string) string {
		if len(pos) != 1 {
			return "takes one RUN id"
		}
		var err error
		if run, err = protocol.ParseRunID(pos[0]); err != nil {
			return "takes one RUN id"
		}
		return ""
	})
	if done {
		return code
	}
	return f.withCoordinator(ctx, cmd, args, func() error { return f.validate(fs, set) }, f.newModel, func(c *coordinator.Coordinator, _ zerolog.Logger) int {
		if !c.Journaling() {
			return cmd.fail(&usageError{"needs the fleet's NATS server (--nats-url or NATS_URL)"})
		}
		res, runErr := c.Resume(ctx, run)
		return finishRun(stdout, stderr, "coordinator resume", f.output, res, runErr)
	})
}
