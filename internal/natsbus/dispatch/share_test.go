package dispatch_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/internal/natsbus/admission"
	"github.com/toolfleet/toolfleet/internal/natsbus/bustest"
	"github.com/toolfleet/toolfleet/internal/natsbus/dispatch"
	"github.com/toolfleet/toolfleet/internal/natsbus/workerbus"
	"github.com/toolfleet/toolfleet/internal/natstest"
	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/harness/harnesstest"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// starts records the order and time in which a tool's calls started, by
// call key.
type starts struct {
	mu    sync.Mutex
	order []protocol.CallKey
	at    map[protocol.CallKey]time.Time
	index map[protocol.CallKey]int
}

func newStarts() *starts {
	return &starts{at: map[protocol.CallKey]time.Time{}, index: map[protocol.CallKey]int{}}
}

// tool is a tool that records its starts and takes d.
func (s *starts) tool(name protocol.ToolName, d time.Duration) harness.Tool {
	return harness.Tool{
		Name: string(name), Parameters: bustest.EmptyObject, Idempotent: true,
		Run: func(ctx context.Context, _ json.RawMessage) (string, error) {
			key := protocol.CallKey(harness.CallKeyFrom(ctx))
			s.mu.Lock()
			if _, ok := s.at[key]; !ok {
				s.index[key] = len(s.order)
				s.order = append(s.order, key)
				s.at[key] = time.Now()
			}
			s.mu.Unlock()
			t := time.NewTimer(d)
			defer t.Stop()
			select {
			case <-t.C:
				return "done", nil
			case <-ctx.Done():
				return "", ctx.Err()
			}
		},
	}
}

// count is how many calls have started.
func (s *starts) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.order)
}

// answers collects the results of inboxes, failing on a call key answered
// twice.
type answers struct {
	mu  sync.Mutex
	got map[protocol.CallKey]protocol.Result
	dup []protocol.CallKey
}

func collect(t *testing.T, ins ...loop.Inbox) *answers {
	a := &answers{got: map[protocol.CallKey]protocol.Result{}}
	for _, in := range ins {
		go func() {
			for ev := range in.Events() {
				if ev.Result == nil {
					continue
				}
				a.mu.Lock()
				if _, ok := a.got[ev.Result.CallKey]; ok {
					a.dup = append(a.dup, ev.Result.CallKey)
				}
				a.got[ev.Result.CallKey] = *ev.Result
				a.mu.Unlock()
			}
		}()
	}
	return a
}

// waitAll waits until every key is answered, then checks none twice.
func (a *answers) waitAll(t *testing.T, keys []protocol.CallKey, within time.Duration) map[protocol.CallKey]protocol.Result {
	t.Helper()
	natstest.WaitFor(t, within, func() error {
		a.mu.Lock()
		defer a.mu.Unlock()
		missing := 0
		for _, k := range keys {
			if _, ok := a.got[k]; !ok {
				missing++
			}
		}
		if missing > 0 {
			return fmt.Errorf("%d of %d calls unanswered", missing, len(keys))
		}
		return nil
	})
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.dup) > 0 {
		t.Fatalf("call keys answered twice: %v", a.dup)
	}
	return maps(a.got)
}

func maps(m map[protocol.CallKey]protocol.Result) map[protocol.CallKey]protocol.Result {
	out := make(map[protocol.CallKey]protocol.Result, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// routedRun opens an inbox for a new run of client in class on d.
func routedRun(t *testing.T, d *dispatch.Dispatcher, client string, class protocol.Class) (protocol.RunID, loop.Inbox) {
	t.Helper()
	run := protocol.NewRunID()
	forget, err := d.Route(run, admission.Route{Client: client, Class: class})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(forget)
	in, err := d.Open(bustest.Ctx(t), run)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { in.Close() })
	return run, in
}

func p99(waits []time.Duration) time.Duration {
	if len(waits) == 0 {
		return 0
	}
	s := slices.Clone(waits)
	slices.Sort(s)
	return s[min(len(s)-1, (len(s)*99+99)/100-1)]
}

// TestClientShareBoundsTheWaitBehindAFlood: one client submits 500 calls
// of a tool at once, another one call at a time. The light client's calls
// are never queued behind more than the flooder's share (the calls
// stream's max_msgs_per_subject) plus what a worker's pull takes together:
// counted, in the tool, as the flooder's calls that started between the
// light call's publish and its start. Every call key is answered exactly
// once. It logs the light client's p99 wait (published → started),
// unloaded and under the flood.
func TestClientShareBoundsTheWaitBehindAFlood(t *testing.T) {
	const (
		share       = 16
		concurrency = 4
		flood       = 500
		light       = 20
		interval    = 100 * time.Millisecond
		toolTime    = 20 * time.Millisecond
	)
	f := bustest.NewFleet(t)
	f.SetShare(t, share)
	s := newStarts()
	h := harnesstest.New(t, harness.Config{}, s.tool("work", toolTime))
	f.StartWorker(t, h, workerbus.WorkerConfig{Name: "w1", Concurrency: concurrency})
	d := f.Dispatcher(dispatch.DispatcherConfig{})
	runF, inF := routedRun(t, d, "flooder", protocol.ClassInteractive)
	runL, inL := routedRun(t, d, "light", protocol.ClassInteractive)
	got := collect(t, inF, inL)

	var keys []protocol.CallKey
	type lightCall struct {
		key       protocol.CallKey
		published time.Time
		before    int // calls started before it was published
	}
	sendLight := func(n int) []lightCall {
		var out []lightCall
		for range n {
			c := bustest.NewCall(runL, "work", `{}`, time.Minute)
			lc := lightCall{key: c.CallKey, before: s.count(), published: time.Now()}
			if err := d.Publish(bustest.Ctx(t), loop.Outgoing{Call: c}); err != nil {
				t.Fatalf("light call: %v", err)
			}
			out = append(out, lc)
			keys = append(keys, c.CallKey)
			natstest.WaitFor(t, 30*time.Second, func() error {
				s.mu.Lock()
				defer s.mu.Unlock()
				if _, ok := s.at[c.CallKey]; !ok {
					return fmt.Errorf("light call not started")
				}
				return nil
			})
			time.Sleep(interval) // pacing the light client, not synchronisation
		}
		return out
	}
	waits := func(calls []lightCall) []time.Duration {
		s.mu.Lock()
		defer s.mu.Unlock()
		var w []time.Duration
		for _, c := range calls {
			w = append(w, s.at[c.key].Sub(c.published))
		}
		return w
	}

	unloaded := waits(sendLight(light / 2))

	// The flood: 500 calls in one batch, as one round of a run would.
	var batch []loop.Outgoing
	floodKeys := map[protocol.CallKey]bool{}
	for range flood {
		c := bustest.NewCall(runF, "work", `{}`, time.Minute)
		batch = append(batch, loop.Outgoing{Call: c})
		floodKeys[c.CallKey] = true
		keys = append(keys, c.CallKey)
	}
	for i, err := range d.PublishBatch(bustest.Ctx(t), batch) {
		if err != nil {
			t.Fatalf("flood call %d: %v", i, err)
		}
	}
	loaded := sendLight(light)

	results := got.waitAll(t, keys, 60*time.Second)
	for k, r := range results {
		if r.Outcome != protocol.OutcomeOK {
			t.Errorf("call %s: outcome %s, want ok (every deadline is a minute away)", k, r.Outcome)
		}
	}
	s.mu.Lock()
	worst := 0
	for _, c := range loaded {
		ahead := 0
		for i := c.before; i < s.index[c.key]; i++ {
			if floodKeys[s.order[i]] {
				ahead++
			}
		}
		worst = max(worst, ahead)
	}
	s.mu.Unlock()
	if worst > share+concurrency {
		t.Fatalf("a light call started after %d of the flooder's calls published before it, want at most share %d + concurrency %d", worst, share, concurrency)
	}
	lw := waits(loaded)
	t.Logf("light client p99 wait (published -> started): unloaded %v, under a flood of %d calls %v (%d light calls; worst flooder calls started ahead of a light call: %d, bound %d)",
		p99(unloaded), flood, p99(lw), len(lw), worst, share+concurrency)
}

// TestHeldCallsAnsweredOnce: calls over the client's share wait in the
// Dispatcher; those whose deadline comes near first are answered
// rate_limited (client_share) and never run, the others run once the share
// frees — each call key answered exactly once.
func TestHeldCallsAnsweredOnce(t *testing.T) {
	f := bustest.NewFleet(t)
	f.SetShare(t, 2)
	d := f.Dispatcher(dispatch.DispatcherConfig{})
	run, in := routedRun(t, d, "acme", protocol.ClassBatch)
	got := collect(t, in)
	// No worker yet: two calls are stored, three are held and answered
	// rate_limited once their deadline is near.
	var stored, held []protocol.CallKey
	for i := range 5 {
		c := bustest.NewCall(run, "work", `{}`, 3*time.Second)
		if i < 2 {
			c.Deadline = time.Now().Add(time.Minute)
			stored = append(stored, c.CallKey)
		} else {
			held = append(held, c.CallKey)
		}
		if err := d.Publish(bustest.Ctx(t), loop.Outgoing{Call: c}); err != nil {
			t.Fatalf("Publish %d: %v", i, err)
		}
	}
	for k, r := range got.waitAll(t, held, 10*time.Second) {
		if r.Outcome != protocol.OutcomeRateLimited || r.ErrorType != dispatch.TerminatedClientShare || r.RetryAfterMS < 1000 {
			t.Errorf("held call %s: %+v, want rate_limited (client_share) with a retry hint", k, r)
		}
	}
	s := newStarts()
	f.StartWorker(t, harnesstest.New(t, harness.Config{}, s.tool("work", 0)), workerbus.WorkerConfig{Name: "w1"})
	results := got.waitAll(t, append(stored, held...), 10*time.Second)
	for _, k := range stored {
		if results[k].Outcome != protocol.OutcomeOK {
			t.Errorf("stored call %s: %s, want ok", k, results[k].Outcome)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range held {
		if _, ran := s.at[k]; ran {
			t.Errorf("held call %s answered rate_limited ran", k)
		}
	}
}

// TestInteractiveCallsStartBeforeQueuedBatch: batch calls queued first,
// interactive calls of the same tool queued behind them; a worker that
// then starts runs every interactive call before any batch call.
func TestInteractiveCallsStartBeforeQueuedBatch(t *testing.T) {
	f := bustest.NewFleet(t)
	s := newStarts()
	h := harnesstest.New(t, harness.Config{}, s.tool("work", 10*time.Millisecond))
	// A first worker creates the consumers, then stops: the calls queue.
	_, stop := f.StartWorker(t, h, workerbus.WorkerConfig{Name: "w0"})
	stop()
	d := f.Dispatcher(dispatch.DispatcherConfig{})
	runB, inB := routedRun(t, d, "nightly", protocol.ClassBatch)
	runI, inI := routedRun(t, d, "alice", protocol.ClassInteractive)
	got := collect(t, inB, inI)
	keys, interactive := queueClasses(t, d, runB, 20, runI, 5)
	f.StartWorker(t, h, workerbus.WorkerConfig{Name: "w1", Concurrency: 2})
	got.waitAll(t, keys, 30*time.Second)
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, k := range s.order[:5] {
		if !interactive[k] {
			t.Fatalf("start %d was a batch call; order %v, want the 5 interactive calls first", i, classes(s.order, interactive))
		}
	}
}

// TestBatchIsNotStarved: while interactive calls keep waiting, a worker
// still starts a batch call after every natsbus.BatchEvery interactive
// ones (give or take the calls a pull takes together).
func TestBatchIsNotStarved(t *testing.T) {
	f := bustest.NewFleet(t)
	s := newStarts()
	h := harnesstest.New(t, harness.Config{}, s.tool("work", 5*time.Millisecond))
	_, stop := f.StartWorker(t, h, workerbus.WorkerConfig{Name: "w0"})
	stop()
	d := f.Dispatcher(dispatch.DispatcherConfig{})
	runB, inB := routedRun(t, d, "nightly", protocol.ClassBatch)
	runI, inI := routedRun(t, d, "alice", protocol.ClassInteractive)
	got := collect(t, inB, inI)
	keys, interactive := queueClasses(t, d, runB, 5, runI, 4*admission.BatchEvery)
	f.StartWorker(t, h, workerbus.WorkerConfig{Name: "w1", Concurrency: 1})
	got.waitAll(t, keys, 30*time.Second)
	s.mu.Lock()
	defer s.mu.Unlock()
	// Within the first 2 × (BatchEvery + 2) starts, while interactive
	// calls still wait, at least two batch calls start.
	batch := 0
	for _, k := range s.order[:2*(admission.BatchEvery+2)] {
		if !interactive[k] {
			batch++
		}
	}
	if batch < 2 {
		t.Fatalf("%d batch calls among the first %d starts, want >= 2; order %v", batch, 2*(admission.BatchEvery+2), classes(s.order, interactive))
	}
}

func classes(order []protocol.CallKey, interactive map[protocol.CallKey]bool) string {
	b := make([]byte, len(order))
	for i, k := range order {
		b[i] = 'b'
		if interactive[k] {
			b[i] = 'i'
		}
	}
	return string(b)
}

// queueClasses publishes nBatch calls of tool work in run runB, then
// nInteractive in run runI, and returns every call's key and which are
// interactive.
func queueClasses(t *testing.T, d *dispatch.Dispatcher, runB protocol.RunID, nBatch int, runI protocol.RunID, nInteractive int) ([]protocol.CallKey, map[protocol.CallKey]bool) {
	t.Helper()
	var keys []protocol.CallKey
	interactive := map[protocol.CallKey]bool{}
	publish := func(run protocol.RunID, n int, isInteractive bool) {
		for range n {
			c := bustest.NewCall(run, "work", `{}`, time.Minute)
			keys = append(keys, c.CallKey)
			interactive[c.CallKey] = isInteractive
			if err := d.Publish(bustest.Ctx(t), loop.Outgoing{Call: c}); err != nil {
				t.Fatal(err)
			}
		}
	}
	publish(runB, nBatch, false)
	publish(runI, nInteractive, true)
	return keys, interactive
}
