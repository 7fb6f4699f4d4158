package natsbus_test

import (
	"errors"
	"testing"

	"github.com/toolfleet/toolfleet/internal/natsbus"
)

// One client's share of the runs stream is below the stream's bound, so
// that no client alone can fill the stream every client submits to.
func TestStreamConfigKeepsTheClientShareBelowTheRunsBound(t *testing.T) {
	for _, c := range []natsbus.StreamConfig{
		{MaxQueuedRunsPerClient: natsbus.DefaultMaxQueuedRuns},
		{MaxQueuedRuns: 100, MaxQueuedRunsPerClient: 100},
		{MaxQueuedRuns: 100, MaxQueuedRunsPerClient: 500},
		{MaxQueuedRuns: natsbus.DefaultMaxQueuedRunsPerClient}, // the default share would fill it
	} {
		var ce *natsbus.ConfigError
		if err := c.Validate(); !errors.As(err, &ce) || ce.Field != "MaxQueuedRunsPerClient" {
			t.Errorf("runs bound %d, share %d: %v, want a MaxQueuedRunsPerClient ConfigError", c.MaxQueuedRuns, c.MaxQueuedRunsPerClient, err)
		}
	}
	for _, c := range []natsbus.StreamConfig{
		{},
		{MaxQueuedRuns: 60, MaxQueuedRunsPerClient: 20},
		{MaxQueuedRunsPerClient: natsbus.DefaultMaxQueuedRuns - 1},
	} {
		if err := c.Validate(); err != nil {
			t.Errorf("runs bound %d, share %d refused: %v", c.MaxQueuedRuns, c.MaxQueuedRunsPerClient, err)
		}
	}
}
