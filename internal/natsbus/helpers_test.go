package natsbus_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/internal/embedded"
	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natstest"
	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// fleet is an embedded server with the fleet's streams and one client
// connection.
type fleet struct {
	srv      *embedded.Server
	nc       *nats.Conn
	js       jetstream.JetStream
	subjects protocol.Subjects
	log      *logBuffer
}

func newFleet(t *testing.T) *fleet {
	t.Helper()
	srv := natstest.Start(t)
	nc := natstest.Connect(t, srv)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	f := &fleet{srv: srv, nc: nc, js: js, subjects: protocol.Subjects{}, log: newLogBuffer(t)}
	if err := natsbus.EnsureStreams(ctx(t), js, f.subjects, natsbus.StreamConfig{}); err != nil {
		t.Fatalf("EnsureStreams: %v", err)
	}
	return f
}

// ctx is the test's context bounded to 30s, so a hung NATS call fails the
// test instead of timing out the whole suite.
func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

// startWorker runs a worker for h on its own connection until the test
// ends (or stop is called) and checks that Run returns nil.
func (f *fleet) startWorker(t *testing.T, h *harness.Harness, cfg natsbus.WorkerConfig) (w *natsbus.Worker, stop func()) {
	t.Helper()
	w, stop, _ = f.startWorkerConn(t, h, cfg)
	return w, stop
}

// startWorkerConn is startWorker, also returning the worker's connection.
func (f *fleet) startWorkerConn(t *testing.T, h *harness.Harness, cfg natsbus.WorkerConfig) (w *natsbus.Worker, stop func(), nc *nats.Conn) {
	t.Helper()
	nc = natstest.Connect(t, f.srv)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Logger = f.log.logger()
	if cfg.AckWait == 0 {
		cfg.AckWait = 2 * time.Second
	}
	if cfg.PollWait == 0 {
		cfg.PollWait = 200 * time.Millisecond
	}
	if cfg.ShutdownGrace == 0 {
		cfg.ShutdownGrace = 2 * time.Second
	}
	w, err = natsbus.NewWorker(nc, js, f.subjects, h, cfg)
	if err != nil {
		t.Fatalf("NewWorker: %v", err)
	}
	rctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(rctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Worker.Run: %v", err)
				}
			case <-time.After(15 * time.Second):
				t.Errorf("Worker.Run did not return within 15s of its context ending")
			}
		})
	}
	t.Cleanup(stop)
	f.waitConsumers(t, h)
	return w, stop, nc
}

// waitConsumers waits until every tool of h has its consumer.
func (f *fleet) waitConsumers(t *testing.T, h *harness.Harness) {
	t.Helper()
	for _, s := range h.Specs() {
		name, _ := f.subjects.Consumer(s.Name)
		natstest.WaitFor(t, 10*time.Second, func() error {
			_, err := f.js.Consumer(ctx(t), f.subjects.CallsStream(), name)
			return err
		})
	}
}

func (f *fleet) dispatcher(cfg natsbus.DispatcherConfig) *natsbus.Dispatcher {
	cfg.Logger = f.log.logger()
	return natsbus.NewDispatcher(f.nc, f.js, f.subjects, cfg)
}

// consumerInfo returns the info of tool's consumer.
func (f *fleet) consumerInfo(t *testing.T, tool string) *jetstream.ConsumerInfo {
	t.Helper()
	name, _ := f.subjects.Consumer(tool)
	c, err := f.js.Consumer(ctx(t), f.subjects.CallsStream(), name)
	if err != nil {
		t.Fatalf("consumer %s: %v", name, err)
	}
	info, err := c.Info(ctx(t))
	if err != nil {
		t.Fatalf("consumer %s info: %v", name, err)
	}
	return info
}

// waitIdle waits until tool's consumer has nothing pending or unacked and
// the calls stream is empty.
func (f *fleet) waitIdle(t *testing.T, tool string) {
	t.Helper()
	natstest.WaitFor(t, 10*time.Second, func() error {
		info := f.consumerInfo(t, tool)
		if info.NumPending != 0 || info.NumAckPending != 0 {
			return fmt.Errorf("consumer of %s: NumPending=%d NumAckPending=%d, want 0 and 0", tool, info.NumPending, info.NumAckPending)
		}
		s, err := f.js.Stream(ctx(t), f.subjects.CallsStream())
		if err != nil {
			return err
		}
		si, err := s.Info(ctx(t))
		if err != nil {
			return err
		}
		if si.State.Msgs != 0 {
			return fmt.Errorf("calls stream holds %d messages, want 0", si.State.Msgs)
		}
		return nil
	})
}

// newCall returns a valid call of tool with args and a deadline d from now.
func newCall(run protocol.RunID, tool, args string, d time.Duration) protocol.Call {
	return protocol.Call{
		V: protocol.Version, RunID: run, Round: 1, CallKey: protocol.NewID(), CallID: "call_1",
		Tool: tool, Arguments: json.RawMessage(args), Deadline: time.Now().Add(d), Attempt: 1,
	}
}

// nextResult reads in until a result for key arrives, skipping other
// events.
func nextResult(t *testing.T, in loop.Inbox, key protocol.CallKey, within time.Duration) protocol.Result {
	t.Helper()
	timer := time.NewTimer(within)
	defer timer.Stop()
	for {
		select {
		case ev, ok := <-in.Events():
			if !ok {
				t.Fatalf("inbox closed while waiting for the result of %s", key)
			}
			if ev.Result != nil && ev.Result.CallKey == key {
				return *ev.Result
			}
		case <-timer.C:
			t.Fatalf("no result for %s within %v", key, within)
		}
	}
}

// nextProgress reads in until a progress notice for key arrives.
func nextProgress(t *testing.T, in loop.Inbox, key protocol.CallKey, within time.Duration) protocol.Progress {
	t.Helper()
	timer := time.NewTimer(within)
	defer timer.Stop()
	for {
		select {
		case ev, ok := <-in.Events():
			if !ok {
				t.Fatalf("inbox closed while waiting for progress of %s", key)
			}
			if ev.Progress != nil && ev.Progress.CallKey == key {
				return *ev.Progress
			}
		case <-timer.C:
			t.Fatalf("no progress for %s within %v", key, within)
		}
	}
}

// logBuffer collects component logs and prints them only when the test
// fails, so no goroutine writes to t.Log after the test ends.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func newLogBuffer(t *testing.T) *logBuffer {
	b := &logBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("component logs:\n%s", b.String())
		}
	})
	return b
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *logBuffer) logger() zerolog.Logger { return zerolog.New(b).Level(zerolog.DebugLevel) }

// contains reports whether the logs hold s.
func (b *logBuffer) contains(s string) bool { return strings.Contains(b.String(), s) }
