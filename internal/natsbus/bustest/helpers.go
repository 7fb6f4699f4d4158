package bustest

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/embedded"
	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natsbus/dispatch"
	"github.com/toolfleet/toolfleet/internal/natsbus/workerbus"
	"github.com/toolfleet/toolfleet/internal/natstest"
	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// Fleet is an embedded server with the fleet's streams and one client
// connection.
type Fleet struct {
	Srv      *embedded.Server
	NC       *nats.Conn
	JS       jetstream.JetStream
	Subjects protocol.Subjects
	Log      *natstest.LogBuffer
}

// NewFleet starts an embedded server with the fleet's streams for t, and
// connects to it; both end with t.
func NewFleet(t *testing.T) *Fleet {
	t.Helper()
	srv := natstest.Start(t)
	nc := natstest.Connect(t, srv)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	f := &Fleet{Srv: srv, NC: nc, JS: js, Subjects: protocol.Subjects{}, Log: natstest.NewLogBuffer(t)}
	if err := natsbus.EnsureStreams(Ctx(t), js, f.Subjects, natsbus.StreamConfig{}); err != nil {
		t.Fatalf("EnsureStreams: %v", err)
	}
	return f
}

// Ctx is the test's context bounded to a minute (a loaded machine elects
// a cluster's stream leaders slowly), so a hung NATS call fails the test
// instead of timing out the whole suite.
func Ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	return c
}

// StartWorker runs a worker for h on its own connection until the test
// ends (or stop is called) and checks that Run returns nil.
func (f *Fleet) StartWorker(t *testing.T, h *harness.Harness, cfg workerbus.WorkerConfig) (w *workerbus.Worker, stop func()) {
	t.Helper()
	w, stop, _ = f.StartWorkerConn(t, h, cfg)
	return w, stop
}

// StartWorkerConn is startWorker, also returning the worker's connection.
func (f *Fleet) StartWorkerConn(t *testing.T, h *harness.Harness, cfg workerbus.WorkerConfig) (w *workerbus.Worker, stop func(), nc *nats.Conn) {
	t.Helper()
	nc = natstest.Connect(t, f.Srv)
	w, stop = f.StartWorkerOn(t, nc, h, cfg)
	return w, stop, nc
}

// StartWorkerOn is startWorker on the connection nc.
func (f *Fleet) StartWorkerOn(t *testing.T, nc *nats.Conn, h *harness.Harness, cfg workerbus.WorkerConfig) (w *workerbus.Worker, stop func()) {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Logger = f.Log.Logger()
	if cfg.AckWait == 0 {
		cfg.AckWait = 2 * time.Second
	}
	if cfg.PollWait == 0 {
		cfg.PollWait = 200 * time.Millisecond
	}
	if cfg.ShutdownGrace == 0 {
		cfg.ShutdownGrace = 2 * time.Second
	}
	var counter *EventCounter
	if cfg.Observer == nil {
		counter = &EventCounter{}
		cfg.Observer = counter
	}
	w, err = workerbus.NewWorker(nc, js, f.Subjects, h, cfg)
	if err != nil {
		t.Fatalf("NewWorker: %v", err)
	}
	if counter != nil {
		counters.Store(w, counter)
		t.Cleanup(func() { counters.Delete(w) })
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
	f.WaitConsumers(t, h)
	return w, stop
}

// WaitConsumers waits until every tool of h has its consumer.
func (f *Fleet) WaitConsumers(t *testing.T, h *harness.Harness) {
	t.Helper()
	for _, s := range h.Specs() {
		name, _ := f.Subjects.Consumer(s.Name)
		natstest.WaitFor(t, 10*time.Second, func() error {
			_, err := f.JS.Consumer(Ctx(t), f.Subjects.CallsStream(), name)
			return err
		})
	}
}

// Dispatcher returns a dispatcher on f's connection, logging to f.Log.
func (f *Fleet) Dispatcher(cfg dispatch.DispatcherConfig) *dispatch.Dispatcher {
	cfg.Logger = f.Log.Logger()
	return dispatch.NewDispatcher(f.NC, f.JS, f.Subjects, cfg)
}

// ConsumerInfo returns the info of tool's consumer.
func (f *Fleet) ConsumerInfo(t *testing.T, tool protocol.ToolName) *jetstream.ConsumerInfo {
	t.Helper()
	name, _ := f.Subjects.Consumer(tool)
	c, err := f.JS.Consumer(Ctx(t), f.Subjects.CallsStream(), name)
	if err != nil {
		t.Fatalf("consumer %s: %v", name, err)
	}
	info, err := c.Info(Ctx(t))
	if err != nil {
		t.Fatalf("consumer %s info: %v", name, err)
	}
	return info
}

// WaitIdle waits until tool's consumer has nothing pending or unacked and
// the calls stream is empty.
func (f *Fleet) WaitIdle(t *testing.T, tool protocol.ToolName) {
	t.Helper()
	natstest.WaitFor(t, 10*time.Second, func() error {
		info := f.ConsumerInfo(t, tool)
		if info.NumPending != 0 || info.NumAckPending != 0 {
			return fmt.Errorf("consumer of %s: NumPending=%d NumAckPending=%d, want 0 and 0", tool, info.NumPending, info.NumAckPending)
		}
		s, err := f.JS.Stream(Ctx(t), f.Subjects.CallsStream())
		if err != nil {
			return err
		}
		si, err := s.Info(Ctx(t))
		if err != nil {
			return err
		}
		if si.State.Msgs != 0 {
			return fmt.Errorf("calls stream holds %d messages, want 0", si.State.Msgs)
		}
		return nil
	})
}

// NewCall returns a valid call of tool with args and a deadline d from now.
func NewCall(run protocol.RunID, tool protocol.ToolName, args string, d time.Duration) protocol.Call {
	return protocol.Call{
		V: protocol.Version, RunID: run, Round: 1, CallKey: protocol.NewCallKey(), CallID: "call_1",
		Tool: tool, Arguments: json.RawMessage(args), Deadline: time.Now().Add(d), Attempt: 1,
	}
}

// OpenRun opens an inbox for a new run on a dispatcher of f; the inbox
// closes when the test ends.
func (f *Fleet) OpenRun(t *testing.T) (*dispatch.Dispatcher, protocol.RunID, loop.Inbox) {
	t.Helper()
	d := f.Dispatcher(dispatch.DispatcherConfig{})
	run := protocol.NewRunID()
	in, err := d.Open(Ctx(t), run)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { in.Close() })
	return d, run, in
}

// NextResult reads in until a result for key arrives, skipping other
// events.
func NextResult(t *testing.T, in loop.Inbox, key protocol.CallKey, within time.Duration) protocol.Result {
	t.Helper()
	return *NextEvent(t, in, within, func(ev loop.Event) bool { return ev.Result != nil && ev.Result.CallKey == key }).Result
}

// NextProgress reads in until a progress notice for key arrives.
func NextProgress(t *testing.T, in loop.Inbox, key protocol.CallKey, within time.Duration) protocol.Started {
	t.Helper()
	return *NextEvent(t, in, within, func(ev loop.Event) bool { return ev.Started != nil && ev.Started.CallKey == key }).Started
}

// NextEvent reads in until an event matches, failing after within.
func NextEvent(t *testing.T, in loop.Inbox, within time.Duration, match func(loop.Event) bool) loop.Event {
	t.Helper()
	timer := time.NewTimer(within)
	defer timer.Stop()
	for {
		select {
		case ev, ok := <-in.Events():
			if !ok {
				t.Fatal("inbox closed while waiting for an event")
			}
			if match(ev) {
				return ev
			}
		case <-timer.C:
			t.Fatalf("no matching event within %v", within)
		}
	}
}

// Lines of a Dispatcher's log: a message refused as malformed or of
// another run, and a result of a run with no inbox.
const (
	Refused    = "dropped a malformed message"
	UnknownRun = "dropped a result of a run with no inbox here"
)

// EventCounter is a WorkerObserver that counts a worker's events by kind
// and reason (a finished call's reason: its outcome), as its metrics do.
type EventCounter struct {
	mu sync.Mutex
	n  map[string]int64
}

// Observe counts ev: a worker's CallObserver.
func (c *EventCounter) Observe(ev workerbus.CallEvent) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int64{}
	}
	c.n[ev.Kind.String()]++
	reason := ev.Reason
	if ev.Kind == workerbus.CallFinished {
		reason = string(ev.Outcome)
	}
	if reason != "" {
		c.n[ev.Kind.String()+":"+reason]++
	}
}

// Count is how many events of kind the worker emitted, with reason (a
// finished call's outcome) unless it is "".
func (c *EventCounter) Count(kind workerbus.CallEventKind, reason string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if reason != "" {
		return c.n[kind.String()+":"+reason]
	}
	return c.n[kind.String()]
}

// Started is how many calls the worker handed to its harness.
func (c *EventCounter) Started() int64 { return c.Count(workerbus.CallStarted, "") }

// counters holds the eventCounter of each worker startWorkerOn started
// without an observer of its test's own.
var counters sync.Map // *natsbus.Worker → *eventCounter

// Events is the counter of the events of w, a worker startWorker started.
func Events(t testing.TB, w *workerbus.Worker) *EventCounter {
	t.Helper()
	c, ok := counters.Load(w)
	if !ok {
		t.Fatal("the worker has no event counter: started with an observer of its own")
	}
	return c.(*EventCounter)
}
