package dispatch_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolfleet/toolfleet/internal/natsbus/bustest"
	"github.com/toolfleet/toolfleet/internal/natsbus/dispatch"
	"github.com/toolfleet/toolfleet/internal/natsbus/workerbus"
	"github.com/toolfleet/toolfleet/internal/natstest"
	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/harness/harnesstest"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

func TestInboxDropsGarbageAndIsBounded(t *testing.T) {
	f := bustest.NewFleet(t)
	d := f.Dispatcher(dispatch.DispatcherConfig{InboxSize: 2, MaxMessageBytes: 4096})
	run := protocol.NewRunID()
	in, err := d.Open(bustest.Ctx(t), run)
	if err != nil {
		t.Fatal(err)
	}
	inbox := in.(*dispatch.Inbox)
	resultSubj, _ := f.Subjects.Result(run, "echo")
	progressSubj, _ := f.Subjects.Started(run)

	result := func(r protocol.RunID) []byte {
		data, _ := protocol.Encode(&protocol.Result{V: 1, RunID: r, CallKey: protocol.NewCallKey(), Outcome: protocol.OutcomeOK})
		return data
	}
	garbage := []struct {
		subject string
		data    []byte
	}{
		{resultSubj, []byte("SECRET-CANARY not json")},
		{resultSubj, []byte(`{"v":2,"run_id":"` + string(run) + `","call_key":"k","outcome":"ok"}`)},
		{resultSubj, result(protocol.NewRunID())}, // another run's result
		{progressSubj, []byte(`{"v":1}`)},
		{resultSubj, []byte(`{"v":1,"run_id":"` + string(run) + `","call_key":"k","outcome":"ok","output":"` + strings.Repeat("x", 8192) + `"}`)},
	}
	for _, g := range garbage {
		if err := f.NC.Publish(g.subject, g.data); err != nil {
			t.Fatal(err)
		}
	}
	natstest.WaitFor(t, 5*time.Second, func() error {
		if got := strings.Count(f.Log.String(), bustest.Refused); got != len(garbage) {
			return fmt.Errorf("%d messages refused, want %d", got, len(garbage))
		}
		return nil
	})
	if len(in.Events()) != 0 {
		t.Fatalf("garbage reached the events channel")
	}
	if f.Log.Contains("SECRET-CANARY") {
		t.Fatal("a garbage payload reached the logs")
	}

	// Nobody reads: two events are kept, the rest dropped without blocking.
	for range 5 {
		f.NC.Publish(resultSubj, result(run))
	}
	natstest.WaitFor(t, 5*time.Second, func() error {
		if got := inbox.Dropped(); got != 3 {
			return fmt.Errorf("Dropped = %d, want 3", got)
		}
		return nil
	})
	if got := len(in.Events()); got != 2 {
		t.Fatalf("buffered events = %d, want 2", got)
	}

	in.Close()
	in.Close() // idempotent
	f.NC.Publish(resultSubj, result(run))
	f.NC.Flush()
	n := 0
	for range in.Events() {
		n++
	}
	if n != 2 {
		t.Fatalf("drained %d events after Close, want the 2 buffered", n)
	}
}

// TestGarbageOnEverySubject publishes garbage, oversized and wrong-version
// messages on the call, result, progress and cancel subjects, then checks
// that the worker and the inbox still work and that every bad call was
// terminated.
func TestGarbageOnEverySubject(t *testing.T) {
	f := bustest.NewFleet(t)
	h := harnesstest.New(t, harness.Config{}, harness.Echo())
	w, _ := f.StartWorker(t, h, workerbus.WorkerConfig{MaxMessageBytes: 64 << 10})
	d, run, in := f.OpenRun(t)

	valid := bustest.NewCall(run, "echo", `{"text":"x"}`, 10*time.Second)
	validJSON, _ := protocol.Encode(&valid)
	wrongVersion := strings.Replace(string(validJSON), `"v":1`, `"v":99`, 1)
	payloads := [][]byte{
		nil,
		[]byte("{"),
		[]byte("[1,2,3]"),
		[]byte(`{"v":1}`),
		[]byte(wrongVersion),
		[]byte(`{"v":1,"run_id":"../../etc","call_key":"k","tool":"echo","arguments":{},"deadline":"2999-01-01T00:00:00Z","round":1,"attempt":1}`),
		append(append([]byte(`{"v":1,"pad":"`), strings.Repeat("A", 100<<10)...), `"}`...), // oversized for the worker
		append(validJSON, []byte(" trailing")...),
		[]byte("\x00\xff\xfe binary"),
	}
	callSubj, _ := f.Subjects.Call("echo", protocol.ClassInteractive, protocol.DefaultClient)
	resultSubj, _ := f.Subjects.Result(run, "echo")
	progressSubj, _ := f.Subjects.Started(run)
	cancelSubj, _ := f.Subjects.Cancel(run, valid.CallKey)
	for _, p := range payloads {
		if _, err := f.JS.Publish(bustest.Ctx(t), callSubj, p); err != nil {
			t.Fatalf("publishing garbage call: %v", err)
		}
		for _, s := range []string{resultSubj, progressSubj, cancelSubj, f.Subjects.Cancels()[:len(f.Subjects.Cancels())-1] + "x.y"} {
			if err := f.NC.Publish(s, p); err != nil {
				t.Fatal(err)
			}
		}
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		if got := bustest.Events(t, w).Count(workerbus.CallTerminated, workerbus.TerminatedMalformed); got != int64(len(payloads)) {
			return fmt.Errorf("Malformed = %d, want %d", got, len(payloads))
		}
		return nil
	})
	f.WaitIdle(t, "echo")

	if err := d.Publish(bustest.Ctx(t), loop.Outgoing{Call: valid}); err != nil {
		t.Fatal(err)
	}
	if r := bustest.NextResult(t, in, valid.CallKey, 10*time.Second); r.Outcome != protocol.OutcomeOK || r.Output != "x" {
		t.Fatalf("result after garbage = %+v", r)
	}
	if got := bustest.Events(t, w).Started(); got != 1 {
		t.Fatalf("Executed = %d, want only the valid call", got)
	}
}

// TestInboxRecoversItsConsumer: when the run's results consumer goes away
// under the inbox (deleted here; in life, idle heartbeats missed on a
// loaded machine lead to the same re-creation), the inbox re-creates it from
// the last result it delivered: no result is lost or repeated, and the
// recovery is counted and logged at info, not as a warning.
func TestInboxRecoversItsConsumer(t *testing.T) {
	f := bustest.NewFleet(t)
	d := f.Dispatcher(dispatch.DispatcherConfig{})
	run := protocol.NewRunID()
	in, err := d.Open(bustest.Ctx(t), run)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	subject, _ := f.Subjects.Result(run, "echo")
	publish := func() protocol.CallKey {
		t.Helper()
		r := protocol.Result{V: 1, RunID: run, CallKey: protocol.NewCallKey(), Outcome: protocol.OutcomeOK}
		data, _ := protocol.Encode(&r)
		if _, err := f.JS.Publish(bustest.Ctx(t), subject, data); err != nil {
			t.Fatal(err)
		}
		return r.CallKey
	}
	before := publish()
	bustest.NextResult(t, in, before, 10*time.Second)

	s, err := f.JS.Stream(bustest.Ctx(t), f.Subjects.ResultsStream())
	if err != nil {
		t.Fatal(err)
	}
	names := s.ConsumerNames(bustest.Ctx(t))
	for name := range names.Name() {
		if err := s.DeleteConsumer(bustest.Ctx(t), name); err != nil {
			t.Fatal(err)
		}
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		if !f.Log.Contains("reading the results: recovering") {
			return fmt.Errorf("the inbox has not noticed its consumer is gone")
		}
		return nil
	})
	after := publish()
	if ev := bustest.NextEvent(t, in, 10*time.Second, func(ev loop.Event) bool { return ev.Result != nil }); ev.Result.CallKey != after {
		t.Fatalf("after recovering, result %s, want only the new one %s", ev.Result.CallKey, after)
	}
	for _, line := range strings.Split(f.Log.String(), "\n") {
		if strings.Contains(line, "reading the results") && !strings.Contains(line, `"level":"info"`) {
			t.Errorf("recovery logged above info: %s", line)
		}
	}
	if !f.Log.Contains("reading the results: recovering") {
		t.Error("the recovery was not logged")
	}
}

// TestACallPublishedAgainAfterItRanIsNotStoredAgain: the dispatcher
// retries a publish that got no answer with the same Nats-Msg-Id. The calls
// stream is a work queue, so by then the first copy may have been taken,
// run and acknowledged (removed); the server still remembers its id for the
// duplicate window and stores nothing.
func TestACallPublishedAgainAfterItRanIsNotStoredAgain(t *testing.T) {
	f := bustest.NewFleet(t)
	w, _ := f.StartWorker(t, harnesstest.New(t, harness.Config{}, harness.Echo()), workerbus.WorkerConfig{})
	d, run, in := f.OpenRun(t)
	call := bustest.NewCall(run, "echo", `{"text":"once"}`, 20*time.Second)
	if err := d.Publish(bustest.Ctx(t), loop.Outgoing{Call: call}); err != nil {
		t.Fatal(err)
	}
	bustest.NextResult(t, in, call.CallKey, 10*time.Second)
	f.WaitIdle(t, "echo")
	if err := d.Publish(bustest.Ctx(t), loop.Outgoing{Call: call}); err != nil {
		t.Fatalf("publishing the same call again: %v", err)
	}
	s, err := f.JS.Stream(bustest.Ctx(t), f.Subjects.CallsStream())
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(bustest.Ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if info.State.LastSeq != 1 || info.State.Msgs != 0 {
		t.Fatalf("calls stream %+v: want one call ever stored, none left", info.State)
	}
	f.WaitIdle(t, "echo")
	if got := bustest.Events(t, w).Started(); got != 1 {
		t.Fatalf("Executed = %d, want 1", got)
	}
}

// TestInboxTakesAResultOnlyFromItsToolsSubject: a worker of another tool
// that learned a call's key cannot answer it — a result on its own tool's
// subject is dropped (and cannot take the result's dedup id either); the
// result on the call's tool's subject is taken.
func TestInboxTakesAResultOnlyFromItsToolsSubject(t *testing.T) {
	f := bustest.NewFleet(t)
	d, run, in := f.OpenRun(t)
	call := bustest.NewCall(run, "deploy", `{"text":"x"}`, 20*time.Second)
	if err := d.Publish(bustest.Ctx(t), loop.Outgoing{Call: call}); err != nil {
		t.Fatal(err)
	}
	publish := func(tool protocol.ToolName, output string) {
		t.Helper()
		subj, _ := f.Subjects.Result(run, tool)
		data, _ := protocol.Encode(&protocol.Result{V: 1, RunID: run, CallKey: call.CallKey, Outcome: protocol.OutcomeOK, Output: output})
		msg := nats.NewMsg(subj)
		msg.Data = data
		msg.Header.Set(protocol.HeaderMsgID, protocol.ResultMsgID(tool, call.CallKey))
		if _, err := f.JS.PublishMsg(bustest.Ctx(t), msg); err != nil {
			t.Fatal(err)
		}
	}
	publish("calculator", "forged")
	publish("deploy", "real")
	r := bustest.NextResult(t, in, call.CallKey, 10*time.Second)
	if r.Output != "real" {
		t.Fatalf("took %q, want the deploy worker's result", r.Output)
	}
	if got := strings.Count(f.Log.String(), bustest.Refused); got != 1 {
		t.Errorf("%d messages refused, want 1 (the forged result)", got)
	}
}
