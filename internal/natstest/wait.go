package natstest

import (
	"testing"
	"time"
)

// WaitFor polls cond every few milliseconds until it returns nil, and fails
// the test with cond's last error if that does not happen within timeout.
func WaitFor(t testing.TB, timeout time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %v: %v", timeout, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
