// Package harnesstest provides tools with known behaviour, and a harness
// that logs to the test, for tests of code that runs a [harness.Harness]
// (workers, the coordinator's end-to-end paths).
//
// Every tool here is a Go tool with a closed schema: {} unless stated.
package harnesstest

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/pkg/harness"
)

// New returns a harness serving tools, logging at debug level to t.Log until
// the test's cleanup (an abandoned tool may log after that; those lines are
// dropped).
func New(t testing.TB, cfg harness.Config, tools ...harness.Tool) *harness.Harness {
	t.Helper()
	w := &testWriter{t: t}
	t.Cleanup(w.stop)
	cfg.Logger = zerolog.New(w).Level(zerolog.DebugLevel)
	h, err := harness.New(cfg, tools...)
	if err != nil {
		t.Fatalf("harnesstest.New: %v", err)
	}
	return h
}

// testWriter writes to t.Log until stopped.
type testWriter struct {
	mu      sync.Mutex
	t       testing.TB
	stopped bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.stopped {
		w.t.Log(strings.TrimSuffix(string(p), "\n"))
	}
	return len(p), nil
}

func (w *testWriter) stop() {
	w.mu.Lock()
	w.stopped = true
	w.mu.Unlock()
}

// closedEmpty is the schema of tools that take no arguments.
var closedEmpty = json.RawMessage(`{"type":"object","additionalProperties":false}`)

// Static returns a tool that returns output.
func Static(name, output string) harness.Tool {
	return harness.Tool{Name: name, Parameters: closedEmpty, Idempotent: true,
		Run: func(context.Context, json.RawMessage) (string, error) { return output, nil }}
}

// Fail returns a tool that returns err (its Result has ErrorType "%T" of err).
func Fail(name string, err error) harness.Tool {
	return harness.Tool{Name: name, Parameters: closedEmpty,
		Run: func(context.Context, json.RawMessage) (string, error) { return "", err }}
}

// Panic returns a tool that panics with value.
func Panic(name string, value any) harness.Tool {
	return harness.Tool{Name: name, Parameters: closedEmpty,
		Run: func(context.Context, json.RawMessage) (string, error) { panic(value) }}
}

// Sleep returns a tool that waits {"ms": N} milliseconds, honouring its
// context, then returns "slept". It returns ctx.Err() if the context ends
// first.
func Sleep(name string) harness.Tool {
	return harness.Tool{
		Name: name,
		Parameters: json.RawMessage(`{"type":"object","properties":{"ms":{"type":"integer","minimum":0,"maximum":600000}},` +
			`"required":["ms"],"additionalProperties":false}`),
		Idempotent: true,
		Run: func(ctx context.Context, args json.RawMessage) (string, error) {
			var in struct{ MS int64 }
			if err := json.Unmarshal(args, &in); err != nil {
				return "", err
			}
			t := time.NewTimer(time.Duration(in.MS) * time.Millisecond)
			defer t.Stop()
			select {
			case <-t.C:
				return "slept", nil
			case <-ctx.Done():
				return "", ctx.Err()
			}
		},
	}
}

// Block returns a tool that ignores its context and returns "released" only
// when release is closed: the harness abandons it at the deadline. Close
// release in a t.Cleanup.
func Block(name string, release <-chan struct{}) harness.Tool {
	return harness.Tool{Name: name, Parameters: closedEmpty,
		Run: func(context.Context, json.RawMessage) (string, error) {
			<-release
			return "released", nil
		}}
}

// Recorder records the calls of a [Record] tool.
type Recorder struct {
	mu   sync.Mutex
	args []json.RawMessage
}

// Record returns a tool (any object arguments) that records each run and
// returns output, and its recorder.
func Record(name, output string) (harness.Tool, *Recorder) {
	r := &Recorder{}
	return harness.Tool{Name: name,
		Run: func(_ context.Context, args json.RawMessage) (string, error) {
			r.mu.Lock()
			r.args = append(r.args, append(json.RawMessage(nil), args...))
			r.mu.Unlock()
			return output, nil
		}}, r
}

// Count returns how many times the tool ran.
func (r *Recorder) Count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.args)
}

// Args returns the arguments of every run, in order.
func (r *Recorder) Args() []json.RawMessage {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]json.RawMessage, len(r.args))
	copy(out, r.args)
	return out
}
