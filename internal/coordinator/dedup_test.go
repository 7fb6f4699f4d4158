package coordinator_test

import (
	"testing"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/pkg/loop"
)

// TestDedupWindowsAgree: a resumed run publishes a non-idempotent call
// again only within the loop's dedup window, which must not outlast the
// calls stream's duplicate window, or a second publish would be a new call.
func TestDedupWindowsAgree(t *testing.T) {
	if loop.DefaultDedupWindow > natsbus.DuplicateWindow {
		t.Fatalf("loop.DefaultDedupWindow = %v, longer than the calls stream's duplicate window %v", loop.DefaultDedupWindow, natsbus.DuplicateWindow)
	}
}
