package serve

import (
	"context"
	"slices"
	"time"

	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// appliedLimits is what a request gets: the loop configuration to run it
// with, the catalog cap on tool timeouts, and the record of both.
type appliedLimits struct {
	loop loop.Config
	// toolCap, when set, lowers every tool's own timeout to at most it
	// (the operator set no override, the request asked for less).
	toolCap time.Duration
	record  protocol.RunLimits
	// clamped names the request's limits that were above the ceiling.
	clamped []string
	// class is the run's priority class: the request's, else its
	// agent's, else interactive.
	class protocol.Class
}

// applyLimits lowers the operator's loop configuration ceil by what req
// asks for. A request never raises a limit: a value above the ceiling is
// clamped to it and named in clamped; 0 keeps the ceiling. Tools the request
// lists in require_approval are added to the operator's.
func applyLimits(ceil loop.Config, req protocol.RunRequest) appliedLimits {
	lc := ceil
	var clamped []string
	lower := func(field string, ceiling, def, asked int) int {
		if ceiling <= 0 {
			ceiling = def
		}
		switch {
		case asked <= 0:
			return ceiling
		case asked > ceiling:
			clamped = append(clamped, field)
			return ceiling
		default:
			return asked
		}
	}
	lc.MaxRounds = lower("max_rounds", ceil.MaxRounds, loop.DefaultMaxRounds, req.MaxRounds)
	lc.MaxToolCallsPerRound = lower("max_tool_calls_per_round", ceil.MaxToolCallsPerRound, loop.DefaultMaxToolCallsPerRound, req.MaxToolCallsPerRound)
	lc.MaxObservationChars = lower("max_observation_chars", ceil.MaxObservationChars, loop.DefaultMaxObservationChars, req.MaxObservationChars)

	var toolCap time.Duration
	if asked := msDuration(req.ToolTimeoutMS); asked > 0 {
		switch {
		case ceil.ToolTimeout <= 0:
			// Each tool keeps its own timeout, lowered to the request's.
			toolCap = asked
		case asked > ceil.ToolTimeout:
			clamped = append(clamped, "tool_timeout_ms")
		default:
			lc.ToolTimeout = asked
		}
	}

	approval := slices.Clone(ceil.RequireApproval)
	for _, name := range req.RequireApproval {
		if !slices.Contains(approval, name) {
			approval = append(approval, name)
		}
	}
	lc.RequireApproval = approval
	lc.DryRun = ceil.DryRun || req.DryRun

	rec := protocol.RunLimits{
		MaxRounds:            lc.MaxRounds,
		MaxToolCallsPerRound: lc.MaxToolCallsPerRound,
		MaxObservationChars:  lc.MaxObservationChars,
		ToolTimeoutMS:        max(lc.ToolTimeout, toolCap).Milliseconds(),
		RequireApproval:      slices.Clone(approval),
		DryRun:               lc.DryRun,
	}
	return appliedLimits{loop: lc, toolCap: toolCap, record: rec, clamped: clamped}
}

// msDuration converts milliseconds, saturating instead of overflowing.
func msDuration(ms int64) time.Duration {
	const maxMS = int64(time.Duration(1<<63-1) / time.Millisecond)
	if ms > maxMS {
		ms = maxMS
	}
	return time.Duration(ms) * time.Millisecond
}

// cappedCatalog lowers every tool's own timeout to at most max (a tool
// without one gets protocol.DefaultToolTimeout, lowered the same way).
type cappedCatalog struct {
	inner loop.Catalog
	max   time.Duration
}

var _ loop.Catalog = cappedCatalog{}

func (c cappedCatalog) Tools(ctx context.Context) ([]protocol.ToolSpec, error) {
	specs, err := c.inner.Tools(ctx)
	if err != nil {
		return nil, err
	}
	out := slices.Clone(specs)
	for i := range out {
		if own := protocol.CallTimeout(&out[i], 0); own > c.max {
			out[i].TimeoutMS = max(c.max.Milliseconds(), 1)
		}
	}
	return out, nil
}
