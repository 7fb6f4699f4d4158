package main

import (
	"context"
	"io"

	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/internal/procsec"
	"github.com/toolfleet/toolfleet/internal/runs"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/model/providers"
)

// runsCommand runs "coordinator runs ...": list, show, cancel, replay or
// fork durable runs from their journals, over NATS ($NATS_URL). A
// replay's --model takes the specs of "coordinator run --model".
func runsCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	models := func(spec string) (loop.Model, error) {
		f := modelFlags{model: spec}
		return f.newModel(zerolog.Nop())
	}
	return envCommand(ctx, "coordinator runs", "toolfleet-runs", args, stdout, stderr, runs.ModelCommand(models, (&providers.Models{Getenv: procsec.Getenv}).Model))
}
