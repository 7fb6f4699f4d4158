package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/toolfleet/toolfleet/internal/coordinator"
	"github.com/toolfleet/toolfleet/internal/logging"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// resumeCommand runs "coordinator resume RUN": it continues a run of
// "coordinator run --nats-url" whose process was killed, from its journal,
// with the same fleet flags, and prints its result as run does.
func resumeCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var f runFlags
	fs := newRunFlagSet(&f, stderr)
	fs.Init("coordinator resume", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), `usage: coordinator resume [flags] RUN

Continues a run of "coordinator run --nats-url" from its journal (FLEET_JOURNAL):
the model is not asked again for a journaled round, a call whose result is
stored is not run again. Give it the flags the run had (model, limits).`)
		fs.PrintDefaults()
		fmt.Fprintln(fs.Output(), "\nexit status: 0 final answer, 3 max rounds reached, 2 bad usage or config, 1 other error")
	}
	pos, err := parseInterleaved(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		return exitUsage
	}
	var run protocol.RunID
	if len(pos) == 1 {
		run, err = protocol.ParseRunID(pos[0])
	}
	if len(pos) != 1 || err != nil {
		fmt.Fprintln(stderr, "coordinator resume: takes one RUN id")
		return exitUsage
	}
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	if err := f.validate(set); err != nil {
		fmt.Fprintln(stderr, "coordinator resume:", err)
		return exitUsage
	}
	log, err := logging.New(stderr, f.logLevel, "coordinator")
	if err != nil {
		fmt.Fprintln(stderr, "coordinator resume:", err)
		return exitUsage
	}
	model, err := f.newModel(log)
	if err != nil {
		fmt.Fprintln(stderr, "coordinator resume:", err)
		return exitUsage
	}
	c, err := coordinator.Open(ctx, f.config(model, log))
	if err != nil {
		fmt.Fprintln(stderr, "coordinator resume:", err)
		var ce *loop.ConfigError
		if errors.As(err, &ce) {
			return exitUsage
		}
		return exitError
	}
	defer c.Close()
	if !c.Journaling() {
		fmt.Fprintln(stderr, "coordinator resume: needs the fleet's NATS server (--nats-url or NATS_URL)")
		return exitUsage
	}
	res, runErr := c.Resume(ctx, run)
	return finishRun(stdout, stderr, "coordinator resume", f.output, res, runErr)
}
