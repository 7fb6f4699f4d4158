// Package dispatchertest is the conformance suite of [loop.Dispatcher]:
// [Run] holds an implementation to the contract the loop relies on, so the
// in-memory fake (looptest) and the NATS transport (natsbus) cannot drift
// apart. Run it from each implementation's tests:
//
//	func TestDispatcherConformance(t *testing.T) {
//		dispatchertest.Run(t, func(t *testing.T, h dispatchertest.Handler) dispatchertest.Fleet {
//			...start the implementation, with workers that answer with h...
//		})
//	}
//
// # Contract
//
//   - Publish/gather: a published call reaches a worker, and the worker's
//     result comes back through the inbox of the call's run.
//   - Every call is answered exactly once by the loop over the dispatcher:
//     a call no worker answers gets the loop's own answer at its deadline,
//     a duplicate result is ignored (the first one counts), and a result
//     that comes after the loop answered the call is ignored.
//   - A full inbox never blocks its sender: an event that finds the Events
//     channel full is dropped and counted (the inbox has a Dropped() int64
//     method); the events already queued stay, in order, and the inbox
//     goes on delivering once the reader catches up. A call whose result
//     was dropped is answered by the loop at its deadline, so every id is
//     still answered exactly once and a slow reader never wedges the
//     transport (or, for NATS, the connection's callbacks).
package dispatchertest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/loop/looptest"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// Handler plays a worker for one call, as in [looptest.Handler]: its
// context ends at the call's deadline, and returning false means the
// worker never answers.
type Handler = looptest.Handler

// Fleet is one implementation under test and the means to play its
// workers.
type Fleet struct {
	// Dispatcher is the implementation under test.
	Dispatcher loop.Dispatcher
	// Send delivers r to the inbox of r.RunID the way a worker serving
	// tool answers (for a transport: its result message). It returns once
	// the message is sent, not once it is delivered, and must not block on
	// a full inbox.
	Send func(t testing.TB, tool protocol.ToolName, r protocol.Result)
	// InboxSize is how many events an inbox's Events channel holds.
	InboxSize int
}

// NewFleet starts an implementation whose workers answer every published
// call with h, for the test t; it stops it when t ends.
type NewFleet func(t *testing.T, h Handler) Fleet

// dropCounter is what the contract asks of an inbox: its drops counted.
type dropCounter interface{ Dropped() int64 }

// Run runs the conformance suite against the implementation newFleet
// starts, one subtest per clause of the contract.
func Run(t *testing.T, newFleet NewFleet) {
	t.Run("PublishAndGather", func(t *testing.T) { testPublishAndGather(t, newFleet) })
	t.Run("EveryCallAnsweredOnce", func(t *testing.T) { testEveryCallAnsweredOnce(t, newFleet) })
	t.Run("LateResultIgnored", func(t *testing.T) { testLateResult(t, newFleet) })
	t.Run("InboxFull", func(t *testing.T) { testInboxFull(t, newFleet) })
}

// waitLimit bounds every wait of the suite: generous, for a loaded machine.
const waitLimit = 30 * time.Second

func suiteCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), waitLimit)
	t.Cleanup(cancel)
	return ctx
}

func testPublishAndGather(t *testing.T, newFleet NewFleet) {
	ctx := suiteCtx(t)
	f := newFleet(t, func(ctx context.Context, c protocol.Call) (protocol.Result, bool) {
		return looptest.OK("output of " + string(c.CallKey)), true
	})
	const run = "gather1"
	in, err := f.Dispatcher.Open(ctx, run)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer in.Close()
	keys := []protocol.CallKey{"k1", "k2", "k3"}
	for i, key := range keys {
		c := call(run, key, "echo", i+1)
		if err := f.Dispatcher.Publish(ctx, loop.Outgoing{Call: c}); err != nil {
			t.Fatalf("Publish(%s): %v", key, err)
		}
	}
	got := map[protocol.CallKey]string{}
	for len(got) < len(keys) {
		select {
		case ev := <-in.Events():
			if ev.Result == nil {
				continue // a progress notice
			}
			if ev.Result.RunID != run {
				t.Fatalf("result of run %q in the inbox of %q", ev.Result.RunID, run)
			}
			got[ev.Result.CallKey] = ev.Result.Output
		case <-ctx.Done():
			t.Fatalf("gathered %d of %d results: %v", len(got), len(keys), got)
		}
	}
	for _, key := range keys {
		if want := "output of " + string(key); got[key] != want {
			t.Errorf("result of %s = %q, want %q", key, got[key], want)
		}
	}
}

// testEveryCallAnsweredOnce runs the loop over the dispatcher with one
// round of three calls: one answered, one answered twice (different
// outputs), one never answered.
func testEveryCallAnsweredOnce(t *testing.T, newFleet NewFleet) {
	var fleet Fleet
	var ready sync.WaitGroup
	ready.Add(1)
	f := newFleet(t, func(ctx context.Context, c protocol.Call) (protocol.Result, bool) {
		ready.Wait()
		switch c.Tool {
		case "hang":
			return protocol.Result{}, false
		case "twice":
			first := looptest.OK("first")
			first.V, first.RunID, first.CallKey, first.Worker, first.Attempt = protocol.Version, c.RunID, c.CallKey, "conformance", c.Attempt
			fleet.Send(t, c.Tool, first)
			return looptest.OK("second"), true
		}
		return looptest.OK("ok"), true
	})
	fleet = f
	ready.Done()
	model := looptest.NewModel(
		looptest.Calls(
			looptest.Call("id-once", "echo", `{}`),
			looptest.Call("id-twice", "twice", `{}`),
			looptest.Call("id-hang", "hang", `{}`),
		),
		looptest.Answer("done"),
	)
	res := runLoop(t, f, model)
	want := map[string]string{"id-once": "ok", "id-twice": "first"}
	answered := answers(t, res)
	for _, id := range []string{"id-once", "id-twice", "id-hang"} {
		if answered[id] != 1 {
			t.Errorf("tool_call_id %s answered %d times, want 1", id, answered[id])
		}
	}
	for _, c := range res.Calls {
		out := observationOf(res, c.CallID)
		switch {
		case c.CallID == "id-hang":
			if c.Outcome == protocol.OutcomeOK {
				t.Errorf("unanswered call: outcome %q, want the loop's own answer", c.Outcome)
			}
		case c.Outcome != protocol.OutcomeOK || out != want[c.CallID]:
			t.Errorf("call %s: outcome %q observation %q, want ok %q", c.CallID, c.Outcome, out, want[c.CallID])
		}
	}
}

// testLateResult makes the first round's call time out and its result
// come during the second round, after the loop answered it.
func testLateResult(t *testing.T, newFleet NewFleet) {
	var fleet Fleet
	var ready sync.WaitGroup
	ready.Add(1)
	var mu sync.Mutex
	var hung protocol.Call
	f := newFleet(t, func(ctx context.Context, c protocol.Call) (protocol.Result, bool) {
		ready.Wait()
		if c.Tool == "hang" {
			mu.Lock()
			hung = c
			mu.Unlock()
			return protocol.Result{}, false
		}
		mu.Lock()
		late := hung
		mu.Unlock()
		if late.CallKey != "" {
			r := looptest.OK("late")
			r.V, r.RunID, r.CallKey, r.Worker, r.Attempt = protocol.Version, late.RunID, late.CallKey, "conformance", late.Attempt
			fleet.Send(t, late.Tool, r)
		}
		return looptest.OK("ok"), true
	})
	fleet = f
	ready.Done()
	model := looptest.NewModel(
		looptest.Calls(looptest.Call("id-late", "hang", `{}`)),
		looptest.Calls(looptest.Call("id-next", "echo", `{}`)),
		looptest.Answer("done"),
	)
	res := runLoop(t, f, model)
	answered := answers(t, res)
	for _, id := range []string{"id-late", "id-next"} {
		if answered[id] != 1 {
			t.Errorf("tool_call_id %s answered %d times, want 1", id, answered[id])
		}
	}
	for _, c := range res.Calls {
		if c.CallID == "id-late" && (c.Outcome == protocol.OutcomeOK || observationOf(res, c.CallID) == "late") {
			t.Errorf("late result changed the answer: outcome %q observation %q", c.Outcome, observationOf(res, c.CallID))
		}
		if c.CallID == "id-next" && c.Outcome != protocol.OutcomeOK {
			t.Errorf("call after the late result: outcome %q, want ok", c.Outcome)
		}
	}
}

// testInboxFull fills a run's inbox while nobody reads it.
func testInboxFull(t *testing.T, newFleet NewFleet) {
	ctx := suiteCtx(t)
	f := newFleet(t, func(ctx context.Context, c protocol.Call) (protocol.Result, bool) {
		return looptest.OK("ok"), true
	})
	const run = "full1"
	in, err := f.Dispatcher.Open(ctx, run)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer in.Close()
	dc, ok := in.(dropCounter)
	if !ok {
		t.Fatalf("inbox %T has no Dropped() int64", in)
	}
	const extra = 3
	result := func(i int) protocol.Result {
		return protocol.Result{V: protocol.Version, RunID: run, CallKey: protocol.CallKey(fmt.Sprintf("k%d", i)), Outcome: protocol.OutcomeOK,
			Output: fmt.Sprint(i), Worker: "conformance", Attempt: 1}
	}
	// Every Send returns although nobody reads: a sender never waits for
	// the reader.
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		for i := range f.InboxSize + extra {
			f.Send(t, "echo", result(i))
		}
	}()
	select {
	case <-sent:
	case <-ctx.Done():
		t.Fatal("Send blocked on a full inbox")
	}
	for dc.Dropped() < extra {
		if ctx.Err() != nil {
			t.Fatalf("Dropped() = %d, want %d once the inbox is full (%d queued)", dc.Dropped(), extra, len(in.Events()))
		}
		time.Sleep(5 * time.Millisecond) // polling a counter, not synchronising
	}
	if got := dc.Dropped(); got != extra {
		t.Errorf("Dropped() = %d, want %d", got, extra)
	}
	// The events queued first stay, in order.
	for i := range f.InboxSize {
		select {
		case ev := <-in.Events():
			if ev.Result == nil || ev.Result.CallKey != result(i).CallKey {
				t.Fatalf("event %d: %+v, want the result of %s", i, ev, result(i).CallKey)
			}
		case <-ctx.Done():
			t.Fatalf("event %d of %d queued never came", i, f.InboxSize)
		}
	}
	select {
	case ev := <-in.Events():
		t.Fatalf("an event beyond the inbox size was kept: %+v", ev)
	default:
	}
	// Caught up, the inbox delivers again.
	next := result(f.InboxSize + extra)
	f.Send(t, "echo", next)
	select {
	case ev := <-in.Events():
		if ev.Result == nil || ev.Result.CallKey != next.CallKey {
			t.Fatalf("after draining: %+v, want the result of %s", ev, next.CallKey)
		}
	case <-ctx.Done():
		t.Fatal("the inbox delivered nothing after it was drained")
	}
}

// call is a valid call of run.
func call(run protocol.RunID, key protocol.CallKey, tool protocol.ToolName, round int) protocol.Call {
	return protocol.Call{
		V: protocol.Version, RunID: run, CallKey: key, CallID: protocol.CallID("id-" + key), Tool: tool, Round: round,
		Arguments: []byte(`{}`), Deadline: time.Now().Add(waitLimit), Attempt: 1,
	}
}

// runLoop runs the loop over f's dispatcher until the model is done.
func runLoop(t *testing.T, f Fleet, model *looptest.Model) *loop.Result {
	t.Helper()
	open := `{"type":"object"}`
	hang := looptest.MustSpec("hang", open)
	hang.TimeoutMS = 300 // its calls time out: the loop answers them
	cat := looptest.NewCatalog(looptest.MustSpec("echo", open), looptest.MustSpec("twice", open), hang)
	r, err := loop.New(loop.Config{Grace: 50 * time.Millisecond, CancelTimeout: time.Second}, model, cat, f.Dispatcher, nil)
	if err != nil {
		t.Fatalf("loop.New: %v", err)
	}
	res, err := r.Run(suiteCtx(t), "go")
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return res
}

// answers counts the tool messages of res by tool_call_id, and checks
// that the call records agree.
func answers(t *testing.T, res *loop.Result) map[string]int {
	t.Helper()
	n := map[string]int{}
	for _, m := range res.Messages {
		if m.Role == "tool" {
			n[m.ToolCallID]++
		}
	}
	records := map[string]int{}
	for _, c := range res.Calls {
		records[c.CallID]++
	}
	for id, k := range records {
		if k != 1 {
			t.Errorf("call %s has %d records, want 1", id, k)
		}
	}
	return n
}

// observationOf is the content of the tool message answering id.
func observationOf(res *loop.Result, id string) string {
	for _, m := range res.Messages {
		if m.Role == "tool" && m.ToolCallID == id {
			return m.Content
		}
	}
	return ""
}
