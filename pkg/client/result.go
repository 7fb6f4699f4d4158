package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// maxResultBytes bounds a stored result this client decodes.
const maxResultBytes = 64 << 20

// Wait waits until run's result is stored and returns it, however long
// before the call it was stored. A run that was refused or failed returns
// its result with a [*RefusedError] or [*FailedError]. It waits until ctx
// ends, across coordinator restarts.
func (c *Client) Wait(ctx context.Context, run Run) (*protocol.RunResult, error) {
	for attempt := 1; ; attempt++ {
		// The bucket may not exist yet (no coordinator has started), and a
		// watch ends when the server restarts: both are waited out.
		results, err := natsbus.OpenRunResults(ctx, c.js, c.subjects)
		if err == nil {
			var data []byte
			if data, err = results.Wait(ctx, run.Key); err == nil {
				return decodeResult(run, data)
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("client: waiting for the result of run %s: %w (last: %v)", run.ID, ctx.Err(), err)
		case <-time.After(min(time.Duration(attempt)*100*time.Millisecond, time.Second)):
		}
	}
}

// Result returns run's stored result, or [ErrNotFound] when none is
// stored (yet, or any more). A refused or failed run returns its result
// with a [*RefusedError] or [*FailedError].
func (c *Client) Result(ctx context.Context, run Run) (*protocol.RunResult, error) {
	results, err := natsbus.OpenRunResults(ctx, c.js, c.subjects)
	if errors.Is(err, natsbus.ErrNoRunsBucket) {
		return nil, fmt.Errorf("client: run %s: %w (no runs bucket)", run.ID, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("client: bucket %s: %w", c.subjects.RunsBucket(), err)
	}
	data, err := results.Get(ctx, run.Key)
	switch {
	case errors.Is(err, natsbus.ErrNoResult):
		return nil, fmt.Errorf("client: run %s: %w", run.ID, ErrNotFound)
	case err != nil:
		return nil, fmt.Errorf("client: reading the result of run %s: %w", run.ID, err)
	}
	return decodeResult(run, data)
}

func decodeResult(run Run, data []byte) (*protocol.RunResult, error) {
	res, err := protocol.DecodeRunResult(data, maxResultBytes)
	if err != nil {
		return nil, fmt.Errorf("client: the stored result of run %s: %w", run.ID, err)
	}
	return &res, resultError(&res)
}
