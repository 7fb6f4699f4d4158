// Package testsync holds the helpers with which tests wait for concurrent
// code without sleeping as synchronisation: a poll with a generous
// deadline, and a buffer that a process or a logger writes while the test
// reads it. It needs nothing but the standard library, so the unit tests
// of pkg/loop and pkg/harness use it as freely as the NATS tests
// (internal/natstest re-exports WaitFor).
package testsync

import (
	"bytes"
	"sync"
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

// WaitUntil polls cond every few milliseconds until it holds, and fails the
// test naming what it waited for if that does not happen within timeout.
func WaitUntil(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Buffer is a bytes.Buffer safe for concurrent writers and readers. Its
// zero value is an empty, unbounded buffer.
type Buffer struct {
	// Limit, when positive, bounds what the buffer keeps, in bytes: past
	// it writes are dropped (and reported as written), so a chatty
	// process cannot fill memory.
	Limit int

	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p, or drops it once the buffer holds Limit bytes.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.Limit > 0 && b.buf.Len() > b.Limit {
		return len(p), nil
	}
	return b.buf.Write(p)
}

// String returns everything kept so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
