package workerbus_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/natsbus/bustest"
	"github.com/toolfleet/toolfleet/internal/natsbus/dispatch"
	"github.com/toolfleet/toolfleet/internal/natsbus/workerbus"
	"github.com/toolfleet/toolfleet/internal/natstest"
	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/harness/harnesstest"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/loop/looptest"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// gate is an idempotent tool that counts its starts and answers
// "out-<id>" once release is closed.
func gate(release <-chan struct{}, started *atomic.Int64) harness.Tool {
	return harness.Tool{
		Name:       "gate",
		Parameters: json.RawMessage(`{"type":"object","properties":{"id":{"type":"string"}},"required":["id"],"additionalProperties":false}`),
		Idempotent: true,
		Run: func(ctx context.Context, args json.RawMessage) (string, error) {
			started.Add(1)
			var a struct {
				ID string `json:"id"`
			}
			if err := json.Unmarshal(args, &a); err != nil {
				return "", err
			}
			select {
			case <-release:
				return "out-" + a.ID, nil
			case <-ctx.Done():
				return "", ctx.Err()
			}
		},
	}
}

// burst is a worker of gate behind a link, and a burst of n calls of one
// run, all running and held by the gate.
type burst struct {
	f       *bustest.Fleet
	link    *link
	worker  *workerbus.Worker
	release chan struct{}
	run     protocol.RunID
	calls   []protocol.Call
}

// batchRefused is the worker's line for a batch of results the server did
// not confirm stored.
const batchRefused = "a batch of results was not confirmed stored"

// startBurst starts the worker and the calls; publish stores them.
func startBurst(t *testing.T, n int, publish func(f *bustest.Fleet, calls []protocol.Call)) *burst {
	t.Helper()
	f := bustest.NewFleet(t)
	b := &burst{f: f, link: newLink(t, f.Srv.ClientURL(), 0), release: make(chan struct{}), run: protocol.NewRunID()}
	var started atomic.Int64
	h := harnesstest.New(t, harness.Config{}, gate(b.release, &started))
	// The link is frozen for a moment below: no redelivery meanwhile.
	b.worker, _ = f.StartWorkerOn(t, b.link.connect(t), h, workerbus.WorkerConfig{Name: "w1", Concurrency: n, AckWait: 30 * time.Second})
	for i := range n {
		b.calls = append(b.calls, bustest.NewCall(b.run, "gate", fmt.Sprintf(`{"id":"%d"}`, i), time.Minute))
	}
	publish(f, b.calls)
	natstest.WaitFor(t, 20*time.Second, func() error {
		if got := started.Load(); got != int64(n) {
			return fmt.Errorf("%d of %d calls started", got, n)
		}
		return nil
	})
	return b
}

// finish lets the held calls answer while the worker's link is frozen,
// waits until the worker holds wantAlone results published alone and
// wantWaiting waiting for a message, then thaws the link.
func (b *burst) finish(t *testing.T, wantAlone, wantWaiting int) {
	t.Helper()
	b.link.freeze()
	close(b.release)
	natstest.WaitFor(t, 20*time.Second, func() error {
		if alone, waiting := b.worker.ResultsInFlight(); alone != wantAlone || waiting != wantWaiting {
			return fmt.Errorf("%d results published alone, %d waiting; want %d and %d", alone, waiting, wantAlone, wantWaiting)
		}
		return nil
	})
	b.link.thaw()
}

// deliveredResults reads n results from in.
func deliveredResults(t *testing.T, in loop.Inbox, n int) []protocol.Result {
	t.Helper()
	var delivered []protocol.Result
	for len(delivered) < n {
		ev := bustest.NextEvent(t, in, 20*time.Second, func(ev loop.Event) bool { return ev.Result != nil })
		delivered = append(delivered, *ev.Result)
	}
	return delivered
}

// storedResults reads every message stored on the run's subject of tool
// and returns the results each holds, and whether it was a batch.
func storedResults(t *testing.T, f *bustest.Fleet, run protocol.RunID, tool protocol.ToolName, want int) (msgs [][]protocol.Result, batch []bool) {
	t.Helper()
	subject, _ := f.Subjects.Result(run, tool)
	cons, err := f.JS.OrderedConsumer(bustest.Ctx(t), f.Subjects.ResultsStream(), jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}})
	if err != nil {
		t.Fatal(err)
	}
	info, err := cons.Info(bustest.Ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	for range info.NumPending {
		m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatalf("reading the results stream: %v", err)
		}
		if m.Headers().Get(protocol.HeaderResultBatch) == "1" {
			rb, err := protocol.DecodeResultBatch(m.Data(), 0)
			if err != nil {
				t.Fatalf("a stored batch does not decode: %v", err)
			}
			if want := protocol.ResultBatchMsgID(tool, keysOf(rb.Results)); m.Headers().Get(protocol.HeaderMsgID) != want {
				t.Errorf("batch %s = %q, want %q", protocol.HeaderMsgID, m.Headers().Get(protocol.HeaderMsgID), want)
			}
			msgs, batch = append(msgs, rb.Results), append(batch, true)
			continue
		}
		r, err := protocol.DecodeResult(m.Data(), 0)
		if err != nil {
			t.Fatalf("a stored result does not decode: %v", err)
		}
		if want := protocol.ResultMsgID(tool, r.CallKey); m.Headers().Get(protocol.HeaderMsgID) != want {
			t.Errorf("result %s = %q, want %q", protocol.HeaderMsgID, m.Headers().Get(protocol.HeaderMsgID), want)
		}
		msgs, batch = append(msgs, []protocol.Result{r}), append(batch, false)
	}
	if uint64(len(msgs)) != info.NumPending || len(msgs) != want {
		t.Fatalf("the results stream holds %d messages for the run, want %d", len(msgs), want)
	}
	return msgs, batch
}

func keysOf(rs []protocol.Result) []protocol.CallKey {
	keys := make([]protocol.CallKey, len(rs))
	for i, r := range rs {
		keys[i] = r.CallKey
	}
	return keys
}

// checkOutputs checks that results answer each of calls once, with the
// output of its own arguments.
func checkOutputs(t *testing.T, calls []protocol.Call, results []protocol.Result) {
	t.Helper()
	want := map[protocol.CallKey]string{}
	for i, c := range calls {
		want[c.CallKey] = "out-" + strconv.Itoa(i)
	}
	seen := map[protocol.CallKey]bool{}
	for _, r := range results {
		if seen[r.CallKey] {
			t.Errorf("call %s answered twice", r.CallKey)
		}
		seen[r.CallKey] = true
		if r.Outcome != protocol.OutcomeOK || r.Output != want[r.CallKey] {
			t.Errorf("result of %s = %s %q, want ok %q", r.CallKey, r.Outcome, r.Output, want[r.CallKey])
		}
	}
	if len(seen) != len(calls) {
		t.Errorf("%d of %d calls answered", len(seen), len(calls))
	}
}

// TestWorkerBatchesTheResultsOfABurst: calls of one run finishing while
// the first result is being stored share one message; every call is
// answered once, with its own output, and acknowledged.
func TestWorkerBatchesTheResultsOfABurst(t *testing.T) {
	const n = 12
	var in loop.Inbox
	b := startBurst(t, n, func(f *bustest.Fleet, calls []protocol.Call) {
		var d *dispatch.Dispatcher
		d, _, in = f.OpenRunOf(t, calls[0].RunID)
		out := make([]loop.Outgoing, len(calls))
		for i, c := range calls {
			out[i] = loop.Outgoing{Call: c}
		}
		for i, err := range d.PublishBatch(bustest.Ctx(t), out) {
			if err != nil {
				t.Fatalf("publishing call %d: %v", i, err)
			}
		}
	})
	// The first result is published alone and its PubAck held by the
	// frozen link; the others wait for it.
	b.finish(t, 1, n-1)
	delivered := deliveredResults(t, in, n)
	checkOutputs(t, b.calls, delivered)

	msgs, batch := storedResults(t, b.f, b.run, "gate", 2)
	if batch[0] || len(msgs[0]) != 1 || !batch[1] || len(msgs[1]) != n-1 {
		t.Fatalf("stored: %d results (batch %v), then %d (batch %v); want 1 alone, then a batch of %d", len(msgs[0]), batch[0], len(msgs[1]), batch[1], n-1)
	}
	checkOutputs(t, b.calls, append(msgs[0], msgs[1]...))
	if n := bustest.Events(t, b.worker).Count(workerbus.ResultFailed, ""); n != 0 || b.f.Log.Contains(batchRefused) {
		t.Errorf("%d results failed, batch refused: %v; want none", n, b.f.Log.Contains(batchRefused))
	}
	// Each call is acknowledged once its result is stored.
	b.f.WaitIdle(t, "gate")
	for _, c := range b.calls {
		if !b.f.Log.Contains(`"call_key":"` + string(c.CallKey) + `","attempt":1,"outcome":"ok"`) {
			t.Errorf("no audit line for call %s", c.CallKey)
		}
	}
}

// TestWorkerKeepsABatchWithinItsCoordinatorsLimit: a coordinator that
// decodes results of at most 1 KiB gets batches of at most 1 KiB.
func TestWorkerKeepsABatchWithinItsCoordinatorsLimit(t *testing.T) {
	const n, limit = 12, 1024
	var in loop.Inbox
	b := startBurst(t, n, func(f *bustest.Fleet, calls []protocol.Call) {
		var d *dispatch.Dispatcher
		d, _, in = f.OpenRunWith(t, calls[0].RunID, dispatch.DispatcherConfig{MaxMessageBytes: limit})
		for _, c := range calls {
			if err := d.Publish(bustest.Ctx(t), loop.Outgoing{Call: c}); err != nil {
				t.Fatal(err)
			}
		}
	})
	b.finish(t, 1, n-1)
	delivered := deliveredResults(t, in, n)
	checkOutputs(t, b.calls, delivered)
	b.f.WaitIdle(t, "gate")
	subject, _ := b.f.Subjects.Result(b.run, "gate")
	cons, err := b.f.JS.OrderedConsumer(bustest.Ctx(t), b.f.Subjects.ResultsStream(), jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}})
	if err != nil {
		t.Fatal(err)
	}
	info, err := cons.Info(bustest.Ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	batches := 0
	for range info.NumPending {
		m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatalf("reading the results stream: %v", err)
		}
		if len(m.Data()) > limit {
			t.Errorf("a stored message of %d bytes, over the coordinator's %d", len(m.Data()), limit)
		}
		if m.Headers().Get(protocol.HeaderResultBatch) == "1" {
			batches++
		}
	}
	if batches < 2 {
		t.Fatalf("%d batches stored, want the waiting results split in at least 2", batches)
	}
}

// TestWorkerPublishesARefusedBatchResultByResult: a batch the server
// refuses (here: over the results stream's message size, which the
// worker cannot see) is published again result by result, each in its
// own message: every call is answered and acknowledged.
func TestWorkerPublishesARefusedBatchResultByResult(t *testing.T) {
	const n = 8
	var in loop.Inbox
	b := startBurst(t, n, func(f *bustest.Fleet, calls []protocol.Call) {
		st, err := f.JS.Stream(bustest.Ctx(t), f.Subjects.ResultsStream())
		if err != nil {
			t.Fatal(err)
		}
		cfg := st.CachedInfo().Config
		cfg.MaxMsgSize = 1024 // a result fits, a batch of several does not
		if _, err := f.JS.UpdateStream(bustest.Ctx(t), cfg); err != nil {
			t.Fatal(err)
		}
		var d *dispatch.Dispatcher
		d, _, in = f.OpenRunOf(t, calls[0].RunID)
		for _, c := range calls {
			if err := d.Publish(bustest.Ctx(t), loop.Outgoing{Call: c}); err != nil {
				t.Fatal(err)
			}
		}
	})
	b.finish(t, 1, n-1)
	b.f.WaitIdle(t, "gate")
	delivered := deliveredResults(t, in, n)
	checkOutputs(t, b.calls, delivered)
	msgs, _ := storedResults(t, b.f, b.run, "gate", n)
	var all []protocol.Result
	for _, m := range msgs {
		all = append(all, m...)
	}
	checkOutputs(t, b.calls, all)
	if n := bustest.Events(t, b.worker).Count(workerbus.ResultFailed, ""); n != 0 || strings.Count(b.f.Log.String(), batchRefused) != 1 {
		t.Errorf("%d results failed, %d batches refused; want one batch refused and no result lost", n, strings.Count(b.f.Log.String(), batchRefused))
	}
}

// TestWorkerAnswersACallWithoutTheBatchHeaderAlone: a call whose
// coordinator does not say it reads batches (an older one) gets its own
// result message, however many finish together.
func TestWorkerAnswersACallWithoutTheBatchHeaderAlone(t *testing.T) {
	const n = 6
	b := startBurst(t, n, func(f *bustest.Fleet, calls []protocol.Call) {
		for _, c := range calls {
			data, err := protocol.Encode(&c)
			if err != nil {
				t.Fatal(err)
			}
			subject, _ := f.Subjects.Call(c.Tool, protocol.ClassInteractive, protocol.DefaultClient)
			replyTo, _ := f.Subjects.Result(c.RunID, c.Tool)
			msg := nats.NewMsg(subject)
			msg.Data = data
			msg.Header.Set(protocol.HeaderMsgID, protocol.CallMsgID(c.CallKey))
			msg.Header.Set(protocol.HeaderReplyTo, replyTo)
			msg.Header.Set(protocol.HeaderDeadline, c.CallDeadline().Header())
			msg.Header.Set(protocol.HeaderVersion, "1")
			if _, err := f.JS.PublishMsg(bustest.Ctx(t), msg); err != nil {
				t.Fatal(err)
			}
		}
	})
	// Every result goes out alone while the link holds their PubAcks.
	b.finish(t, n, 0)
	b.f.WaitIdle(t, "gate")
	msgs, batch := storedResults(t, b.f, b.run, "gate", n)
	var all []protocol.Result
	for i := range msgs {
		if batch[i] {
			t.Fatalf("message %d is a batch", i)
		}
		all = append(all, msgs[i]...)
	}
	checkOutputs(t, b.calls, all)
}

// storeResults publishes the encoded results rs on run's subject of tool
// into the results stream, as one batch (of the first result's run) when
// batch is set.
func storeResults(t *testing.T, f *bustest.Fleet, run protocol.RunID, tool protocol.ToolName, batch bool, rs ...protocol.Result) {
	t.Helper()
	subject, _ := f.Subjects.Result(run, tool)
	enc := make([][]byte, len(rs))
	for i := range rs {
		var err error
		if enc[i], err = protocol.Encode(&rs[i]); err != nil {
			t.Fatal(err)
		}
	}
	msg := nats.NewMsg(subject)
	msg.Data = enc[0]
	if batch {
		msg.Data = protocol.EncodeResultBatch(rs[0].RunID, enc)
		msg.Header.Set(protocol.HeaderResultBatch, "1")
	}
	// Also called from a consumer's callback: no Fatal, and a context of
	// its own.
	pctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := f.JS.PublishMsg(pctx, msg); err != nil {
		t.Errorf("storing results: %v", err)
	}
}

func okResult(run protocol.RunID, key protocol.CallKey, out string) protocol.Result {
	return protocol.Result{V: protocol.Version, RunID: run, CallKey: key, Outcome: protocol.OutcomeOK, Output: out, Worker: "w", Attempt: 1}
}

// TestInboxChecksEachResultOfABatch: a batch's results are checked one by
// one, as results that come alone are: a result on the subject of another
// tool than its call's, or of another run, is refused, and the others of
// its batch are delivered; a batch that breaks the batch's rules (mixed
// runs) or is not a batch is refused whole.
func TestInboxChecksEachResultOfABatch(t *testing.T) {
	f := bustest.NewFleet(t)
	d, run, in := f.OpenRun(t)
	k1, k2, k3 := bustest.NewCall(run, "echo", `{}`, time.Minute), bustest.NewCall(run, "echo", `{}`, time.Minute), bustest.NewCall(run, "echo", `{}`, time.Minute)
	for _, c := range []protocol.Call{k1, k2, k3} {
		if err := d.Publish(bustest.Ctx(t), loop.Outgoing{Call: c}); err != nil {
			t.Fatal(err)
		}
	}
	other := protocol.NewRunID()
	unknown := protocol.NewCallKey()
	storeResults(t, f, run, "echo", true, okResult(run, k1.CallKey, "one"))
	// k2 is a call to echo, answered on another tool's subject: refused;
	// the unknown key beside it is delivered (the loop drops it).
	storeResults(t, f, run, "forger", true, okResult(run, k2.CallKey, "forged"), okResult(run, unknown, "unknown"))
	// A batch of another run on this run's subject: each refused.
	storeResults(t, f, run, "echo", true, okResult(other, protocol.NewCallKey(), "x"), okResult(other, protocol.NewCallKey(), "y"))
	// Mixed runs: refused whole, k3 with it.
	storeResults(t, f, run, "echo", true, okResult(run, k3.CallKey, "mixed"), okResult(other, protocol.NewCallKey(), "z"))
	// A single result marked as a batch: refused.
	subject, _ := f.Subjects.Result(run, "echo")
	msg := nats.NewMsg(subject)
	msg.Data, _ = protocol.Encode(ptr(okResult(run, k3.CallKey, "marked")))
	msg.Header.Set(protocol.HeaderResultBatch, "1")
	if _, err := f.JS.PublishMsg(bustest.Ctx(t), msg); err != nil {
		t.Fatal(err)
	}
	// Then k3 alone, the last one stored.
	storeResults(t, f, run, "echo", false, okResult(run, k3.CallKey, "three"))

	var got []string
	for {
		ev := bustest.NextEvent(t, in, 20*time.Second, func(ev loop.Event) bool { return ev.Result != nil })
		got = append(got, ev.Result.Output)
		if ev.Result.Output == "three" {
			break
		}
	}
	if want := []string{"one", "unknown", "three"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("delivered %q, want %q", got, want)
	}
	// k2 on the forger's subject, the two of another run, the mixed batch
	// and the marked single.
	if g := strings.Count(f.Log.String(), bustest.Refused); g != 5 {
		t.Fatalf("%d messages refused, want 5", g)
	}
	for _, code := range []string{"tool_mismatch", "run_mismatch", "invalid_field", "malformed"} {
		if !f.Log.Contains(`"code":"` + code + `"`) {
			t.Errorf("no refusal logged with code %s:\n%s", code, f.Log.String())
		}
	}
}

func ptr[T any](v T) *T { return &v }

// TestLoopTakesTheFirstOfADuplicatedResult: a call answered alone and
// again in a batch (a batch whose PubAck was lost, its results then
// published alone) reaches the loop once, with the first answer.
func TestLoopTakesTheFirstOfADuplicatedResult(t *testing.T) {
	f := bustest.NewFleet(t)
	d := f.Dispatcher(dispatch.DispatcherConfig{})
	t.Cleanup(func() { d.Close() })
	// The worker is played by a consumer of the calls stream: once the
	// round's three calls are in, it answers the first alone, then all
	// three in one batch.
	var mu sync.Mutex
	var calls []protocol.Call
	answered := make(chan struct{}) // closed once both answers are stored
	cons, err := f.JS.CreateOrUpdateConsumer(bustest.Ctx(t), f.Subjects.CallsStream(), jetstream.ConsumerConfig{
		Durable: "twice", FilterSubject: f.Subjects.Calls(), AckPolicy: jetstream.AckExplicitPolicy,
	})
	if err != nil {
		t.Fatal(err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		m.Ack()
		if limit, ok := protocol.ResultBatchLimit(m.Headers().Get(protocol.HeaderResultBatch)); !ok || limit != protocol.DefaultMaxMessageBytes {
			t.Errorf("a call of the dispatcher says it reads batches of %d bytes (%v), want its result limit", limit, ok)
		}
		c, err := protocol.DecodeCall(m.Data(), 0)
		if err != nil {
			t.Errorf("call: %v", err)
			return
		}
		mu.Lock()
		calls = append(calls, c)
		all := len(calls) == 3
		mu.Unlock()
		if !all {
			return
		}
		storeResults(t, f, c.RunID, "echo", false, okResult(c.RunID, calls[0].CallKey, "alone"))
		var rs []protocol.Result
		for _, c := range calls {
			rs = append(rs, okResult(c.RunID, c.CallKey, "batch"))
		}
		storeResults(t, f, c.RunID, "echo", true, rs...)
		close(answered)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cc.Stop)

	model := looptest.NewModel(
		looptest.Calls(looptest.Call("id-a", "echo", `{}`), looptest.Call("id-b", "echo", `{}`), looptest.Call("id-c", "echo", `{}`)),
		looptest.Answer("done"),
	)
	cat := looptest.NewCatalog(looptest.MustSpec("echo", `{"type":"object"}`))
	r, err := loop.New(loop.Config{Logger: f.Log.Logger()}, model, cat, d, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Run(bustest.Ctx(t), "go")
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	// The loop may have its answers before the PubAck of the batch is in.
	select {
	case <-answered:
	case <-time.After(30 * time.Second):
		t.Fatal("the answers were never stored")
	}
	got := map[string][]string{}
	for _, m := range res.Messages {
		if m.Role == "tool" {
			got[m.ToolCallID] = append(got[m.ToolCallID], m.Content)
		}
	}
	want := map[string][]string{"id-a": {"alone"}, "id-b": {"batch"}, "id-c": {"batch"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("tool messages %v, want %v", got, want)
	}
	if !f.Log.Contains(`"drop_reason":"duplicate"`) {
		t.Errorf("the duplicate was not logged as one:\n%s", f.Log.String())
	}
}

// TestCaughtUpDeliversAPastBatch: a resumed run reads a batch stored
// before its inbox opened with CaughtUp, each of its results once.
func TestCaughtUpDeliversAPastBatch(t *testing.T) {
	f := bustest.NewFleet(t)
	run := protocol.NewRunID()
	past := []protocol.Result{
		okResult(run, protocol.NewCallKey(), "a"), okResult(run, protocol.NewCallKey(), "b"), okResult(run, protocol.NewCallKey(), "c"),
	}
	storeResults(t, f, run, "echo", true, past...)
	_, _, in := f.OpenRunOf(t, run)
	select {
	case <-in.(loop.CatchUpInbox).CaughtUp():
	case <-time.After(30 * time.Second):
		t.Fatal("CaughtUp never closed")
	}
	last := okResult(run, protocol.NewCallKey(), "last")
	storeResults(t, f, run, "echo", false, last)
	seen := map[protocol.CallKey]int{}
	bustest.NextEvent(t, in, 10*time.Second, func(ev loop.Event) bool {
		if ev.Result == nil {
			return false
		}
		seen[ev.Result.CallKey]++
		return ev.Result.CallKey == last.CallKey
	})
	for _, r := range append(past, last) {
		if seen[r.CallKey] != 1 {
			t.Errorf("result %s delivered %d times, want 1 (all: %v)", r.CallKey, seen[r.CallKey], seen)
		}
	}
}
