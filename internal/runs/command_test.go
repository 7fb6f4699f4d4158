package runs_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/toolfleet/toolfleet/internal/runs"
)

// TestCancelNeedsItsAuthor: "runs cancel" without --by, where $USER is not
// set, is a usage error and connects to nothing: a cancel request names
// who asks, and coordinators ignore one that does not.
func TestCancelNeedsItsAuthor(t *testing.T) {
	t.Setenv("USER", "")
	var out, errOut strings.Builder
	conn := func(context.Context) (*nats.Conn, error) {
		t.Error("connected")
		return nil, errors.New("no server")
	}
	if code := runs.Command(t.Context(), []string{"cancel", "run1"}, &out, &errOut, conn); code != 2 || !strings.Contains(errOut.String(), "--by is required") {
		t.Fatalf("exit %d, %q: want 2 and --by required", code, errOut.String())
	}
}
