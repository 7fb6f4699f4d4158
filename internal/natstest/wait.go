package natstest

import (
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/internal/testsync"
)

// WaitFor polls cond every few milliseconds until it returns nil, and fails
// the test with cond's last error if that does not happen within timeout.
// It is [testsync.WaitFor], here for the tests that start a server.
func WaitFor(t testing.TB, timeout time.Duration, cond func() error) {
	t.Helper()
	testsync.WaitFor(t, timeout, cond)
}
