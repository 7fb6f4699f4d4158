package workerbus_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natsbus/bustest"
	"github.com/toolfleet/toolfleet/internal/natsbus/dispatch"
	"github.com/toolfleet/toolfleet/internal/natsbus/workerbus"
	"github.com/toolfleet/toolfleet/internal/natstest"
	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/harness/harnesstest"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

func TestCallRoundTrip(t *testing.T) {
	f := bustest.NewFleet(t)
	h := harnesstest.New(t, harness.Config{}, harness.Echo())
	f.StartWorker(t, h, workerbus.WorkerConfig{Name: "w1"})
	d, run, in := f.OpenRun(t)

	call := bustest.NewCall(run, "echo", `{"text":"hello"}`, 10*time.Second)
	if err := d.Publish(bustest.Ctx(t), loop.Outgoing{Call: call, StartedNotices: true}); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	// Progress and result travel on two subscriptions: either may come
	// first.
	var p *protocol.Started
	var r protocol.Result
	for p == nil || r.RunID == "" {
		ev := bustest.NextEvent(t, in, 10*time.Second, func(loop.Event) bool { return true })
		switch {
		case ev.Started != nil && ev.Started.CallKey == call.CallKey:
			p = ev.Started
		case ev.Result != nil && ev.Result.CallKey == call.CallKey:
			r = *ev.Result
		}
	}
	if p.Worker != "w1" || p.Attempt != 1 {
		t.Errorf("progress = %+v, want worker w1, attempt 1", p)
	}
	if r.Outcome != protocol.OutcomeOK || r.Output != "hello" || r.Worker != "w1" || r.Attempt != 1 || r.RunID != run {
		t.Fatalf("result = %+v, want ok \"hello\" from w1, attempt 1", r)
	}

	// The result is stored in the results stream too, on the run's subject.
	subj, _ := f.Subjects.Result(run, call.Tool)
	s, err := f.JS.Stream(bustest.Ctx(t), f.Subjects.ResultsStream())
	if err != nil {
		t.Fatal(err)
	}
	stored, err := s.GetLastMsgForSubject(bustest.Ctx(t), subj)
	if err != nil {
		t.Fatalf("result not in the results stream: %v", err)
	}
	sr, err := protocol.DecodeResult(stored.Data, 0)
	if err != nil || sr.CallKey != call.CallKey || sr.Output != "hello" {
		t.Fatalf("stored result = %+v (%v), want the call's result", sr, err)
	}
	if got := stored.Header.Get(protocol.HeaderMsgID); got != protocol.ResultMsgID(call.Tool, call.CallKey) {
		t.Errorf("stored result %s = %q, want %q", protocol.HeaderMsgID, got, protocol.ResultMsgID(call.Tool, call.CallKey))
	}
	f.WaitIdle(t, "echo")
}

// TestStartedNoticeOnlyWhenAsked: a coordinator's calls ask for no started
// notice, so a call is answered without one (a message less per call) —
// a non-idempotent one too, whose start its coordinator learns by
// withdrawing it at its deadline — and a call published under
// loop.WithStartedNotices gets one whatever its tool.
func TestStartedNoticeOnlyWhenAsked(t *testing.T) {
	f := bustest.NewFleet(t)
	var onceRuns atomic.Int64
	h := harnesstest.New(t, harness.Config{}, harness.Echo(), bustest.Counting("once", &onceRuns, 0, false))
	f.StartWorker(t, h, workerbus.WorkerConfig{Name: "w1"})
	d, run, in := f.OpenRun(t)

	// Every event read is checked: a notice of an earlier call, had the
	// worker sent one, precedes the last call's on the same subject from
	// the same connection.
	quiet := bustest.NewCall(run, "echo", `{"text":"quiet"}`, 10*time.Second)
	once := bustest.NewCall(run, "once", `{}`, 10*time.Second)
	asked := bustest.NewCall(run, "once", `{}`, 10*time.Second)
	started := map[protocol.CallKey]bool{}
	answered := map[protocol.CallKey]bool{}
	await := func(key protocol.CallKey, wantStarted bool) {
		t.Helper()
		bustest.NextEvent(t, in, 10*time.Second, func(ev loop.Event) bool {
			switch {
			case ev.Started != nil:
				started[ev.Started.CallKey] = true
			case ev.Result != nil:
				answered[ev.Result.CallKey] = true
			}
			return answered[key] && started[key] == wantStarted
		})
	}
	if err := d.Publish(bustest.Ctx(t), loop.Outgoing{Call: quiet}); err != nil {
		t.Fatal(err)
	}
	await(quiet.CallKey, false)
	if err := d.Publish(bustest.Ctx(t), loop.Outgoing{Call: once}); err != nil {
		t.Fatal(err)
	}
	await(once.CallKey, false)
	if err := d.Publish(bustest.Ctx(t), loop.Outgoing{Call: asked, StartedNotices: true}); err != nil {
		t.Fatal(err)
	}
	await(asked.CallKey, true)
	if started[quiet.CallKey] || started[once.CallKey] {
		t.Fatalf("started notices nobody asked for: idempotent %v, non-idempotent %v", started[quiet.CallKey], started[once.CallKey])
	}
}

func TestPublishDeduplicatesAndAppliesBackPressure(t *testing.T) {
	srv := natstest.Start(t)
	nc := natstest.Connect(t, srv)
	js, _ := jetstream.New(nc)
	subjects := protocol.Subjects{}
	if err := natsbus.EnsureStreams(bustest.Ctx(t), js, subjects, natsbus.StreamConfig{MaxCallsPerClient: 2}); err != nil {
		t.Fatal(err)
	}
	d := dispatch.NewDispatcher(nc, js, subjects, dispatch.DispatcherConfig{})
	run := protocol.NewRunID()
	first := bustest.NewCall(run, "nobody", `{}`, time.Minute)
	for range 2 {
		if err := d.Publish(bustest.Ctx(t), loop.Outgoing{Call: first}); err != nil {
			t.Fatalf("Publish: %v", err)
		}
	}
	s, _ := js.Stream(bustest.Ctx(t), subjects.CallsStream())
	info, _ := s.Info(bustest.Ctx(t))
	if info.State.Msgs != 1 {
		t.Fatalf("calls stream holds %d messages after publishing one call twice, want 1", info.State.Msgs)
	}
	if err := d.Publish(bustest.Ctx(t), loop.Outgoing{Call: bustest.NewCall(run, "nobody", `{}`, time.Minute)}); err != nil {
		t.Fatalf("second call: %v", err)
	}
	// The third is over the client's share: held in the Dispatcher (which
	// answers it rate_limited if it never gets in), not stored.
	if err := d.Publish(bustest.Ctx(t), loop.Outgoing{Call: bustest.NewCall(run, "nobody", `{}`, time.Minute)}); err != nil {
		t.Fatalf("third call: %v", err)
	}
	if info, _ := s.Info(bustest.Ctx(t)); info.State.Msgs != 2 {
		t.Fatalf("calls stream holds %d messages after a third call over the share of 2, want 2", info.State.Msgs)
	}
	// Another tool is not blocked by the full one.
	if err := d.Publish(bustest.Ctx(t), loop.Outgoing{Call: bustest.NewCall(run, "other", `{}`, time.Minute)}); err != nil {
		t.Fatalf("call to another tool: %v", err)
	}
}

func TestPublishRefusesInvalidCalls(t *testing.T) {
	f := bustest.NewFleet(t)
	d := f.Dispatcher(dispatch.DispatcherConfig{MaxMessageBytes: 2048})
	run := protocol.NewRunID()
	big := bustest.NewCall(run, "echo", `{"text":"`+string(make([]byte, 0))+fmt.Sprintf("%04000d", 0)+`"}`, time.Minute)
	tests := []struct {
		name string
		call protocol.Call
	}{
		{"bad tool name", bustest.NewCall(run, "no.dots", `{}`, time.Minute)},
		{"no run id", func() protocol.Call { c := bustest.NewCall(run, "echo", `{}`, time.Minute); c.RunID = ""; return c }()},
		{"too large", big},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := d.Publish(bustest.Ctx(t), loop.Outgoing{Call: tc.call}); err == nil {
				t.Fatal("Publish accepted an invalid call")
			}
		})
	}
}

func TestWorkersShareAToolsConsumer(t *testing.T) {
	f := bustest.NewFleet(t)
	var runs atomic.Int64
	tool := bustest.Counting("slow", &runs, 20*time.Millisecond, true)
	w1, _ := f.StartWorker(t, harnesstest.New(t, harness.Config{}, tool), workerbus.WorkerConfig{Name: "w1", Concurrency: 2})
	w2, _ := f.StartWorker(t, harnesstest.New(t, harness.Config{}, tool), workerbus.WorkerConfig{Name: "w2", Concurrency: 2})
	d, run, in := f.OpenRun(t)
	const n = 40
	keys := map[protocol.CallKey]bool{}
	for range n {
		c := bustest.NewCall(run, "slow", `{}`, 20*time.Second)
		keys[c.CallKey] = true
		if err := d.Publish(bustest.Ctx(t), loop.Outgoing{Call: c}); err != nil {
			t.Fatal(err)
		}
	}
	byWorker := map[string]int{}
	deadline := time.After(20 * time.Second)
	for len(keys) > 0 {
		select {
		case ev := <-in.Events():
			if ev.Result != nil && keys[ev.Result.CallKey] {
				delete(keys, ev.Result.CallKey)
				byWorker[ev.Result.Worker]++
				if ev.Result.Outcome != protocol.OutcomeOK {
					t.Errorf("outcome %s, want ok", ev.Result.Outcome)
				}
			}
		case <-deadline:
			t.Fatalf("%d calls unanswered", len(keys))
		}
	}
	s1, s2 := bustest.Events(t, w1).Started(), bustest.Events(t, w2).Started()
	if s1 == 0 || s2 == 0 || s1+s2 != n {
		t.Fatalf("executed w1=%d w2=%d, want both > 0 and %d in all", s1, s2, n)
	}
	if byWorker["w1"] != int(s1) || byWorker["w2"] != int(s2) {
		t.Fatalf("results by worker %v do not match executed counts %d/%d", byWorker, s1, s2)
	}
	f.WaitIdle(t, "slow")
}

func TestExpiredCallIsNeverRun(t *testing.T) {
	f := bustest.NewFleet(t)
	var runs atomic.Int64
	h := harnesstest.New(t, harness.Config{}, bustest.Counting("effect", &runs, 0, false))
	w, _ := f.StartWorker(t, h, workerbus.WorkerConfig{})
	d := f.Dispatcher(dispatch.DispatcherConfig{})
	call := bustest.NewCall(protocol.NewRunID(), "effect", `{}`, -time.Second)
	if err := d.Publish(bustest.Ctx(t), loop.Outgoing{Call: call}); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		if got := bustest.Events(t, w).Count(workerbus.CallTerminated, workerbus.TerminatedExpired); got != 1 {
			return fmt.Errorf("Expired = %d, want 1", got)
		}
		return nil
	})
	f.WaitIdle(t, "effect")
	if got := runs.Load(); got != 0 {
		t.Fatalf("the expired call ran %d times, want 0", got)
	}
	if got := bustest.Events(t, w).Started(); got != 0 {
		t.Fatalf("Executed = %d, want 0", got)
	}
}

func TestCancelStopsARunningExecTool(t *testing.T) {
	f := bustest.NewFleet(t)
	dir := t.TempDir()
	script := filepath.Join(dir, "sleepy.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\nexec sleep 30\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	manifest := filepath.Join(dir, "tools.json")
	if err := os.WriteFile(manifest, []byte(`{"tools":[{"name":"sleepy","description":"sleeps",`+
		`"command":["./sleepy.sh"],"timeout":"60s","idempotent":true}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	tools, err := harness.LoadManifest(manifest)
	if err != nil {
		t.Fatalf("LoadManifest: %v", err)
	}
	w, _ := f.StartWorker(t, harnesstest.New(t, harness.Config{}, tools...), workerbus.WorkerConfig{})
	d, run, in := f.OpenRun(t)
	call := bustest.NewCall(run, "sleepy", `{}`, 30*time.Second)
	if err := d.Publish(bustest.Ctx(t), loop.Outgoing{Call: call, StartedNotices: true}); err != nil {
		t.Fatal(err)
	}
	bustest.NextProgress(t, in, call.CallKey, 10*time.Second)
	// The call is registered for cancels just after the progress notice:
	// keep cancelling until the worker has counted one.
	start := time.Now()
	natstest.WaitFor(t, 10*time.Second, func() error {
		if err := d.Cancel(bustest.Ctx(t), protocol.Cancel{RunID: run, CallKey: call.CallKey}); err != nil {
			return err
		}
		if bustest.Events(t, w).Count(workerbus.CallFinished, string(protocol.OutcomeCancelled)) == 0 {
			return errors.New("not cancelled yet")
		}
		return nil
	})
	r := bustest.NextResult(t, in, call.CallKey, 5*time.Second)
	if r.Outcome != protocol.OutcomeCancelled {
		t.Fatalf("outcome = %s, want cancelled", r.Outcome)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("cancel took %v, want well under the tool's 30s", took)
	}
	f.WaitIdle(t, "sleepy")
}

func TestMalformedCallIsTerminated(t *testing.T) {
	f := bustest.NewFleet(t)
	h := harnesstest.New(t, harness.Config{}, harness.Echo())
	w, _ := f.StartWorker(t, h, workerbus.WorkerConfig{})
	subj, _ := f.Subjects.Call("echo", protocol.ClassInteractive, protocol.DefaultClient)
	if _, err := f.JS.Publish(bustest.Ctx(t), subj, []byte("this is not a call")); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		if got := bustest.Events(t, w).Count(workerbus.CallTerminated, workerbus.TerminatedMalformed); got != 1 {
			return fmt.Errorf("Malformed = %d, want 1", got)
		}
		return nil
	})
	f.WaitIdle(t, "echo")
	if info := f.ConsumerInfo(t, "echo"); info.Delivered.Consumer != 1 || info.NumRedelivered != 0 {
		t.Fatalf("consumer delivered %d (redelivered %d), want the garbage delivered once", info.Delivered.Consumer, info.NumRedelivered)
	}
	if f.Log.Contains("this is not a call") {
		t.Fatal("the malformed payload reached the logs")
	}
	// The worker still serves calls.
	d, run, in := f.OpenRun(t)
	call := bustest.NewCall(run, "echo", `{"text":"still here"}`, 10*time.Second)
	if err := d.Publish(bustest.Ctx(t), loop.Outgoing{Call: call}); err != nil {
		t.Fatal(err)
	}
	if r := bustest.NextResult(t, in, call.CallKey, 10*time.Second); r.Output != "still here" {
		t.Fatalf("result after garbage = %+v", r)
	}
}

// TestNonIdempotentCallIsClaimedBeforeItRuns: while the tool runs, the
// call has left the calls stream (claimed: its start record stored, then
// its message acknowledged, before the tool starts) and nothing can
// redeliver it, long before the ack wait (30s here) could.
func TestNonIdempotentCallIsClaimedBeforeItRuns(t *testing.T) {
	f := bustest.NewFleet(t)
	started := make(chan struct{})
	release := make(chan struct{})
	tool := harness.Tool{Name: "charge", Parameters: bustest.EmptyObject, Idempotent: false,
		Run: func(ctx context.Context, _ json.RawMessage) (string, error) {
			close(started)
			select {
			case <-release:
				return "charged", nil
			case <-ctx.Done():
				return "", ctx.Err()
			}
		}}
	f.StartWorker(t, harnesstest.New(t, harness.Config{}, tool), workerbus.WorkerConfig{AckWait: 30 * time.Second})
	d, run, in := f.OpenRun(t)
	call := bustest.NewCall(run, "charge", `{}`, 20*time.Second)
	if err := d.Publish(bustest.Ctx(t), loop.Outgoing{Call: call}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("tool did not start")
	}
	s, err := f.JS.Stream(bustest.Ctx(t), f.Subjects.CallsStream())
	if err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		if si, err := s.Info(bustest.Ctx(t)); err != nil || si.State.Msgs != 0 {
			return fmt.Errorf("while the tool runs the calls stream holds %+v (%v), want no message (claimed before running)", si.State, err)
		}
		return nil
	})
	if f.StartRecord(t, call) == nil {
		t.Fatal("the tool runs without a start record")
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		if info := f.ConsumerInfo(t, "charge"); info.NumAckPending != 0 || info.NumPending != 0 {
			return fmt.Errorf("while the tool runs: NumAckPending=%d NumPending=%d, want 0 (settled before running)", info.NumAckPending, info.NumPending)
		}
		return nil
	})
	close(release)
	if r := bustest.NextResult(t, in, call.CallKey, 10*time.Second); r.Outcome != protocol.OutcomeOK || r.Output != "charged" {
		t.Fatalf("result = %+v", r)
	}
}

// TestHeartbeatPreventsRedeliveryOfALongCall: a call running half as long
// again as the ack wait is delivered once, its heartbeats keeping it. The
// ack wait is 3s with a heartbeat every 50ms, so only a stall of nearly
// 3s — more than even a heavily loaded machine's — could let the server
// redeliver.
func TestHeartbeatPreventsRedeliveryOfALongCall(t *testing.T) {
	f := bustest.NewFleet(t)
	var runs atomic.Int64
	h := harnesstest.New(t, harness.Config{}, bustest.Counting("long", &runs, 4500*time.Millisecond, true))
	w, _ := f.StartWorker(t, h, workerbus.WorkerConfig{AckWait: 3 * time.Second, Heartbeat: 50 * time.Millisecond, Concurrency: 4})
	d, run, in := f.OpenRun(t)
	call := bustest.NewCall(run, "long", `{}`, 10*time.Second)
	if err := d.Publish(bustest.Ctx(t), loop.Outgoing{Call: call}); err != nil {
		t.Fatal(err)
	}
	r := bustest.NextResult(t, in, call.CallKey, 10*time.Second)
	if r.Outcome != protocol.OutcomeOK || r.Attempt != 1 {
		t.Fatalf("result = %+v, want ok on attempt 1", r)
	}
	f.WaitIdle(t, "long")
	if got := runs.Load(); got != 1 {
		t.Fatalf("tool ran %d times, want exactly once", got)
	}
	if got := bustest.Events(t, w).Started(); got != 1 {
		t.Fatalf("Executed = %d, want 1", got)
	}
	if info := f.ConsumerInfo(t, "long"); info.Delivered.Consumer != 1 {
		t.Fatalf("consumer delivered the call %d times, want 1", info.Delivered.Consumer)
	}
}

func TestForgedReplySubjectIsRefused(t *testing.T) {
	f := bustest.NewFleet(t)
	h := harnesstest.New(t, harness.Config{}, harness.Echo())
	w, _ := f.StartWorker(t, h, workerbus.WorkerConfig{Concurrency: 1})
	watch, err := f.NC.SubscribeSync(">")
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Unsubscribe()
	f.NC.Flush()

	run := protocol.NewRunID()
	callSubj, _ := f.Subjects.Call("echo", protocol.ClassInteractive, protocol.DefaultClient)
	otherRun, _ := f.Subjects.Result(protocol.NewRunID(), "echo")
	tests := []struct {
		name    string
		replyTo string // "" leaves the header out
	}{
		{"other run", otherRun},
		{"foreign subject", "evil.sink"},
		{"wildcard", "fleet.result.>"},
		{"missing", ""},
	}
	for i, tc := range tests {
		call := bustest.NewCall(run, "echo", `{"text":"forged"}`, 10*time.Second)
		data, _ := protocol.Encode(&call)
		msg := nats.NewMsg(callSubj)
		msg.Data = data
		msg.Header.Set(protocol.HeaderMsgID, protocol.CallMsgID(call.CallKey))
		if tc.replyTo != "" {
			msg.Header.Set(protocol.HeaderReplyTo, tc.replyTo)
		}
		if _, err := f.JS.PublishMsg(bustest.Ctx(t), msg); err != nil {
			t.Fatal(err)
		}
		natstest.WaitFor(t, 10*time.Second, func() error {
			if got := bustest.Events(t, w).Count(workerbus.CallTerminated, workerbus.TerminatedMalformed); got != int64(i+1) {
				return fmt.Errorf("%s: Malformed = %d, want %d", tc.name, got, i+1)
			}
			return nil
		})
	}
	if got := bustest.Events(t, w).Started(); got != 0 {
		t.Fatalf("Executed = %d, want 0", got)
	}
	f.WaitIdle(t, "echo")
	// Nothing went to any result, progress or forged subject.
	for {
		m, err := watch.NextMsg(50 * time.Millisecond)
		if err != nil {
			break
		}
		switch {
		case m.Subject == "evil.sink", len(m.Subject) > 12 && m.Subject[:12] == "fleet.result",
			len(m.Subject) > 14 && m.Subject[:14] == "fleet.progress":
			t.Fatalf("worker published on %s for a forged call", m.Subject)
		}
	}
}

func TestShutdown(t *testing.T) {
	tests := []struct {
		name     string
		runFor   time.Duration // how long the tool runs
		grace    time.Duration
		want     protocol.Outcome
		maxTaken time.Duration // bound on Run's return after its context ends
	}{
		{"calls in flight finish within the grace", 300 * time.Millisecond, 5 * time.Second, protocol.OutcomeOK, 4 * time.Second},
		{"calls past the grace are cancelled", time.Minute, 100 * time.Millisecond, protocol.OutcomeCancelled, 3 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := bustest.NewFleet(t)
			var runs atomic.Int64
			h := harnesstest.New(t, harness.Config{}, bustest.Counting("work", &runs, tc.runFor, true))
			_, stop := f.StartWorker(t, h, workerbus.WorkerConfig{ShutdownGrace: tc.grace})
			d, run, in := f.OpenRun(t)
			call := bustest.NewCall(run, "work", `{}`, 30*time.Second)
			if err := d.Publish(bustest.Ctx(t), loop.Outgoing{Call: call, StartedNotices: true}); err != nil {
				t.Fatal(err)
			}
			bustest.NextProgress(t, in, call.CallKey, 10*time.Second)
			start := time.Now()
			stop() // returns once Run has returned
			if took := time.Since(start); took > tc.maxTaken {
				t.Fatalf("shutdown took %v, want under %v", took, tc.maxTaken)
			}
			// Run returned after the call was answered.
			if r := bustest.NextResult(t, in, call.CallKey, time.Second); r.Outcome != tc.want {
				t.Fatalf("outcome = %s, want %s", r.Outcome, tc.want)
			}
			f.WaitIdle(t, "work")
		})
	}
}

func TestWorkerConfigValidate(t *testing.T) {
	tests := []struct {
		name  string
		cfg   workerbus.WorkerConfig
		field string // "" means valid
	}{
		{"zero value", workerbus.WorkerConfig{}, ""},
		{"bad name", workerbus.WorkerConfig{Name: "a b"}, "Name"},
		{"negative concurrency", workerbus.WorkerConfig{Concurrency: -1}, "Concurrency"},
		{"heartbeat not below ack wait", workerbus.WorkerConfig{AckWait: time.Second, Heartbeat: time.Second}, "Heartbeat"},
		{"tiny ack wait", workerbus.WorkerConfig{AckWait: time.Millisecond}, "AckWait"},
		{"negative max deliver", workerbus.WorkerConfig{MaxDeliver: -1}, "MaxDeliver"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			var ce *natsbus.ConfigError
			switch {
			case tc.field == "" && err != nil:
				t.Fatalf("Validate = %v, want nil", err)
			case tc.field != "" && (!errors.As(err, &ce) || ce.Field != tc.field):
				t.Fatalf("Validate = %v, want a ConfigError for %s", err, tc.field)
			}
		})
	}
}

func TestNewWorkerRefusesAHarnessWithoutTools(t *testing.T) {
	f := bustest.NewFleet(t)
	h, err := harness.New(harness.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := workerbus.NewWorker(f.NC, f.JS, f.Subjects, h, workerbus.WorkerConfig{}); err == nil {
		t.Fatal("NewWorker accepted a harness with no tools")
	}
}

// TestRunStoppedBeforeItServes: a worker stopped before its consumers are
// ready has run nothing and failed at nothing: Run returns nil.
func TestRunStoppedBeforeItServes(t *testing.T) {
	f := bustest.NewFleet(t)
	w, err := workerbus.NewWorker(f.NC, f.JS, f.Subjects, harnesstest.New(t, harness.Config{}, harness.Echo()), workerbus.WorkerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	stopped, cancel := context.WithCancel(context.Background())
	cancel()
	if err := w.Run(stopped); err != nil {
		t.Fatalf("Run = %v, want nil", err)
	}
}
