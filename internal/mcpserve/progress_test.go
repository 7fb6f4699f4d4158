package mcpserve_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolfleet/toolfleet/internal/natstest"
)

// TestToolProgressReachesTheClient: what a tool reports while it runs on a
// worker reaches the MCP client that sent a progressToken, as
// notifications/progress.
func TestToolProgressReachesTheClient(t *testing.T) {
	f := newFleet(t, 0)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := f.cs.CallTool(ctx, &mcp.CallToolParams{Name: "slow", Arguments: map[string]any{}, Meta: mcp.Meta{"progressToken": "p"}})
		done <- err
	}()
	natstest.WaitFor(t, 30*time.Second, func() error {
		f.mu.Lock()
		defer f.mu.Unlock()
		if !slices.Contains(f.progress, "slowly working") {
			return fmt.Errorf("progress %q lacks the tool's report", f.progress)
		}
		return nil
	})
	cancel()
	<-done
}
