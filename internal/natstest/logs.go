package natstest

import (
	"bytes"
	"strings"
	"sync"
	"testing"

	"github.com/rs/zerolog"
)

// LogBuffer keeps what components log, for assertions, and prints it when
// the test fails. Components may go on writing after the test ended: it
// never touches t outside the cleanup.
type LogBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// NewLogBuffer returns an empty LogBuffer that prints its content if t
// fails.
func NewLogBuffer(t testing.TB) *LogBuffer {
	b := &LogBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("component logs:\n%s", b.String())
		}
	})
	return b
}

// Write appends p; it is safe for concurrent use.
func (b *LogBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *LogBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Contains reports whether the logs hold s.
func (b *LogBuffer) Contains(s string) bool { return strings.Contains(b.String(), s) }

// Logger returns a debug-level JSON logger writing to b.
func (b *LogBuffer) Logger() zerolog.Logger { return zerolog.New(b).Level(zerolog.DebugLevel) }
