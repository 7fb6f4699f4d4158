package coordinator_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolfleet/toolfleet/internal/agents"
	"github.com/toolfleet/toolfleet/internal/coordinator"
	"github.com/toolfleet/toolfleet/internal/metrics"
	"github.com/toolfleet/toolfleet/internal/metrics/metricstest"
	"github.com/toolfleet/toolfleet/internal/natsbus/stores"
	"github.com/toolfleet/toolfleet/internal/natstest"
	"github.com/toolfleet/toolfleet/internal/runs"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// pubAck is what a server's acknowledgement of a stored message looks
// like: what a stream capturing a reply subject stores when a client
// chooses that subject as the reply of its own publication.
const pubAck = `{"stream":"FLEET_RUNS","seq":1}`

// answerOnly answers at once.
const answerOnly = `{"turns": [{"content": "done"}]}`

// refused is the coordinator's count of refused messages of kind.
func (s *server) refused(t *testing.T, kind string) float64 {
	t.Helper()
	v, _ := metricstest.Scrape(t, "http://"+s.c.MetricsAddr()+"/metrics").
		Value("toolfleet_coordinator_refused_messages_total", L("kind", kind))
	return v
}

// waitRefused waits until the coordinator counted n refused messages of
// kind.
func (s *server) waitRefused(t *testing.T, kind string, n float64) {
	t.Helper()
	natstest.WaitFor(t, 20*time.Second, func() error {
		if got := s.refused(t, kind); got != n {
			return fmt.Errorf("%s refused %v, want %v", kind, got, n)
		}
		return nil
	})
}

// storeOnCancelSubject stores data on run's cancel subject, in the
// cancels stream, as anyone allowed to publish there (or whose reply the
// server sends there) can.
func (f *serveFleet) storeOnCancelSubject(run protocol.RunID, data string) {
	f.t.Helper()
	if _, err := f.js.Publish(f.t.Context(), "fleet.journal.cancel."+string(run), []byte(data)); err != nil {
		f.t.Fatal(err)
	}
}

// TestServeCancelsOnlyOnAValidRequest stores, on the cancel subject of a
// running run, a server's acknowledgement, garbage and a valid request for
// another run: the coordinator logs and counts each and the run finishes
// normally. A valid request (coordinator runs cancel's) cancels the next
// run. Stored before their runs start, an acknowledgement cancels nothing
// and a valid request cancels its run at its start.
func TestServeCancelsOnlyOnAValidRequest(t *testing.T) {
	f := newServeFleet(t)
	logs := natstest.NewLogBuffer(t)
	s := f.start(serveOpts{script: slowThenAnswer, toolsFile: writeSlowTool(t, "3"), logs: logs, metrics: true})

	run := f.accepted(`{"prompt": "go"}`)
	waitRunStarted(t, f)
	other := protocol.SubmissionRunID("default", "someone-else")
	for _, data := range []string{pubAck, `garbage`,
		`{"v":1,"run_id":"` + string(other) + `","by":"mallory"}`,
		`{"v":1,"run_id":"` + string(run) + `"}`} {
		f.storeOnCancelSubject(run, data)
	}
	s.waitRefused(t, metrics.RefusedCancelRequest, 4)
	if res := f.result(run); res.TerminationReason != "natural" || res.Answer != "slow said " {
		t.Fatalf("result %+v, want natural: no valid cancel request was stored", res)
	}
	if !logs.Contains(`"message":"ignored a message on the run's cancel subject that is not a cancel request of the run naming its author"`) {
		t.Error("no log line for the ignored cancel requests")
	}

	// A valid request cancels a running run.
	run2 := f.accepted(`{"prompt": "go"}`)
	natstest.WaitFor(t, 30*time.Second, func() error {
		return wantDelivered(f, 2)
	})
	if err := runs.Cancel(t.Context(), f.js, protocol.Subjects{}, run2, "alice", "test"); err != nil {
		t.Fatal(err)
	}
	if res := f.result(run2); res.TerminationReason != "cancelled" {
		t.Fatalf("result %+v, want cancelled", res)
	}

	// Stored before the runs start.
	ackFirst := protocol.SubmissionRunID("default", "ack-first")
	f.storeOnCancelSubject(ackFirst, pubAck)
	validFirst := protocol.SubmissionRunID("default", "valid-first")
	if err := runs.Cancel(t.Context(), f.js, protocol.Subjects{}, validFirst, "alice", "before it starts"); err != nil {
		t.Fatal(err)
	}
	f.queued("ack-first", `{"prompt": "go"}`)
	if res := f.result(ackFirst); res.TerminationReason != "natural" {
		t.Fatalf("result %+v of a run with an acknowledgement on its cancel subject, want natural", res)
	}
	f.queued("valid-first", `{"prompt": "go"}`)
	if res := f.result(validFirst); res.TerminationReason != "cancelled" {
		t.Fatalf("result %+v of a run cancelled before it started, want cancelled", res)
	}
	if n := s.refused(t, metrics.RefusedCancelRequest); n < 5 {
		t.Errorf("refused cancel requests %v, want at least 5", n)
	}
}

// wantDelivered checks that the slow tool's consumer delivered n calls.
func wantDelivered(f *serveFleet, n uint64) error {
	cons, err := f.js.Consumer(f.t.Context(), "FLEET_CALLS", "tool_slow")
	if err != nil {
		return err
	}
	info, err := cons.Info(f.t.Context())
	if err != nil {
		return err
	}
	if info.Delivered.Consumer != n {
		return fmt.Errorf("%d calls of slow delivered, want %d", info.Delivered.Consumer, n)
	}
	return nil
}

// TestServeRunsOverAForeignStoredValue stores, under the result keys of
// runs not yet submitted, a server's acknowledgement and another run's
// valid result: the serving coordinator logs and counts each, runs the
// runs, and their results replace what was there. A run whose key holds
// its own result is not run again.
func TestServeRunsOverAForeignStoredValue(t *testing.T) {
	f := newServeFleet(t)
	logs := natstest.NewLogBuffer(t)
	// Queued requests live 5s, and so does the runs stream's duplicate
	// window: a retry can be stored again within the test.
	s := f.start(serveOpts{script: answerOnly, logs: logs, metrics: true, serve: coordinator.ServeConfig{QueuedRunMaxAge: 5 * time.Second}})
	f.result(f.accepted(`{"prompt": "warm up"}`)) // the runs bucket exists
	kv, err := f.js.KeyValue(t.Context(), "fleet_runs")
	if err != nil {
		t.Fatal(err)
	}
	someone := protocol.RunResult{V: protocol.Version, RunID: protocol.SubmissionRunID("default", "someone"), Answer: "forged", TerminationReason: "natural"}
	foreign, _ := json.Marshal(someone)
	for i, value := range []string{pubAck, string(foreign)} {
		id := fmt.Sprintf("pre-empted-%d", i)
		run := protocol.SubmissionRunID("default", id)
		if _, err := kv.Put(t.Context(), protocol.RunKey("default", run), []byte(value)); err != nil {
			t.Fatal(err)
		}
		f.queued(id, `{"prompt": "go"}`)
		var res protocol.RunResult
		natstest.WaitFor(t, 20*time.Second, func() error {
			e, err := kv.Get(t.Context(), protocol.RunKey("default", run))
			if err != nil {
				return err
			}
			if res, err = protocol.DecodeRunResult(e.Value(), 0); err != nil || res.RunID != run {
				return fmt.Errorf("the key holds %.80s (%v)", e.Value(), err)
			}
			return nil
		})
		if res.TerminationReason != "natural" || res.Answer != "done" {
			t.Fatalf("result %+v, want the run's own", res)
		}
		s.waitRefused(t, metrics.RefusedRunResult, float64(i+1))
	}
	if !logs.Contains(`"message":"the run's key held a value that is not a result of the run: the run's result replaced it"`) {
		t.Error("no log line for the refused values")
	}
	// A run's own stored result: its submission, sent again past the
	// duplicate window, is acknowledged, not run.
	natstest.WaitFor(t, 30*time.Second, func() error {
		msg := nats.NewMsg("fleet.run.submit.default.default.pre-empted-0")
		msg.Data = []byte(`{"prompt": "again"}`)
		msg.Header.Set(protocol.HeaderMsgID, protocol.SubmissionMsgID("default", "pre-empted-0"))
		msg.Header.Set(protocol.HeaderAgent, protocol.DefaultAgent)
		ack, err := f.js.PublishMsg(t.Context(), msg)
		switch {
		case err != nil:
			return err
		case ack.Duplicate:
			return errors.New("the copy is within the duplicate window")
		}
		return nil
	})
	f.consumerIdle()
	if !logs.Contains(`"message":"the run already has a result: its submission is acknowledged, not run again"`) {
		t.Error("a run with its own result was not skipped")
	}
	if n := s.refused(t, metrics.RefusedRunResult); n != 2 {
		t.Errorf("refused values %v, want 2", n)
	}
}

// TestServeRunsAnAgentOnItsNewestValidRevision puts a valid definition of
// an agent, then three revisions that are a server's acknowledgement (what
// a stream capturing the agents bucket's key stores when a client names it
// as the reply of its own publication): a run of the agent runs on the
// valid one, the coordinator logs and counts the invalid ones, and the
// registry marks them (what "coordinator agents ls" and "show" print).
func TestServeRunsAnAgentOnItsNewestValidRevision(t *testing.T) {
	f := newServeFleet(t)
	logs := natstest.NewLogBuffer(t)
	s := f.start(serveOpts{script: answerOnly, logs: logs, metrics: true})
	f.result(f.accepted(`{"prompt": "warm up"}`)) // the fleet's buckets exist
	store, err := stores.OpenAgents(t.Context(), f.js, protocol.Subjects{})
	if err != nil {
		t.Fatal(err)
	}
	reg := &agents.Registry{Store: store}
	_, valid, err := reg.Put(t.Context(), []byte(`{"name":"support","model":{"provider":"scripted","script":{"turns":[{"content":"from the valid revision"}]}}}`))
	if err != nil {
		t.Fatal(err)
	}
	kv, err := f.js.KeyValue(t.Context(), "fleet_agents")
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := kv.Put(t.Context(), "support", []byte(pubAck)); err != nil {
			t.Fatal(err)
		}
	}

	msg := nats.NewMsg("fleet.run.submit.default.support.s1")
	msg.Data = []byte(`{"prompt": "help"}`)
	msg.Header.Set(protocol.HeaderMsgID, protocol.SubmissionMsgID("default", "s1"))
	msg.Header.Set(protocol.HeaderAgent, "support")
	if _, err := f.js.PublishMsg(t.Context(), msg); err != nil {
		t.Fatal(err)
	}
	if res := f.result(protocol.SubmissionRunID("default", "s1")); res.TerminationReason != "natural" || res.Answer != "from the valid revision" {
		t.Fatalf("result %+v, want the valid revision's answer", res)
	}
	s.waitRefused(t, metrics.RefusedAgentRevision, 3)
	if !logs.Contains(`"message":"a revision of the agent does not validate: its runs start on the newest one that does (coordinator agents show)"`) {
		t.Error("no log line for the invalid revisions")
	}

	revs, err := reg.Revisions(t.Context(), "support")
	if err != nil {
		t.Fatal(err)
	}
	var invalid int
	for _, r := range revs {
		switch {
		case r.Err != nil:
			invalid++
		case r.Used != (r.Revision == valid):
			t.Errorf("revision %d: used %v, want runs to start on %d", r.Revision, r.Used, valid)
		}
	}
	if invalid != 3 {
		t.Errorf("revisions %+v: %d invalid, want 3", revs, invalid)
	}
}

// TestServeForwardsProgressOnlyFromTheCallsTool: while a call of the slow
// tool runs, progress reports for it are published on its progress
// subject as a worker of another tool (echo) would, naming its own tool,
// and as one naming none: the client never sees them and the coordinator
// counts them. A report naming the call's tool reaches the client with
// its control characters made harmless.
func TestServeForwardsProgressOnlyFromTheCallsTool(t *testing.T) {
	f := newServeFleet(t)
	s := f.start(serveOpts{script: slowThenAnswer, toolsFile: writeSlowTool(t, "15"), metrics: true})
	calls := make(chan *nats.Msg, 4)
	sub, err := f.nc.ChanSubscribe("fleet.call.slow.>", calls)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe() //nolint:errcheck
	progress := make(chan *nats.Msg, 64)
	psub, err := f.nc.ChanSubscribe("fleet.run.progress.>", progress)
	if err != nil {
		t.Fatal(err)
	}
	defer psub.Unsubscribe() //nolint:errcheck
	run := f.accepted(`{"prompt": "go"}`)
	var call protocol.Call
	select {
	case m := <-calls:
		if call, err = protocol.DecodeCall(m.Data, 0); err != nil || call.RunID != run {
			t.Fatalf("call %+v %v", call, err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no call of slow")
	}
	waitRunStarted(t, f)
	subject := "fleet.progress." + string(run) + "." + string(call.CallKey)
	report := func(tool protocol.ToolName, seq uint64, msg string) {
		data, err := protocol.Encode(&protocol.Progress{V: protocol.Version, RunID: run, CallKey: call.CallKey, Tool: tool, Worker: "w", Seq: seq, Message: msg})
		if err != nil {
			t.Fatal(err)
		}
		if err := f.nc.Publish(subject, data); err != nil {
			t.Fatal(err)
		}
	}
	report("echo", 1, "forged by echo's worker")
	report("", 2, "forged by nobody")
	report("slow", 3, "\x1b]52;c;ZXZpbA==\x07half \x1b[2Jway")
	// the call's start (protocol.CallStarted) goes to the client beside
	// its reports
	isStart := func(m *nats.Msg) bool { _, err := protocol.DecodeCallStarted(m.Data, 0); return err == nil }
	var m *nats.Msg
	timeout := time.After(30 * time.Second)
	for m == nil {
		select {
		case m = <-progress:
			if isStart(m) {
				m = nil
			}
		case <-timeout:
			t.Fatal("the slow tool's report never reached the client")
		}
	}
	p, err := protocol.DecodeProgress(m.Data, 0)
	if err != nil {
		t.Fatal(err)
	}
	if p.Seq != 3 || p.Tool != "slow" {
		t.Fatalf("the client got %+v, want only the slow tool's report", p)
	}
	if strings.ContainsAny(p.Message, "\x1b\x07") || !strings.Contains(p.Message, "half") {
		t.Errorf("the client got %q, want it terminal-safe", p.Message)
	}
	s.waitRefused(t, metrics.RefusedProgress, 2)
	if err := runs.Cancel(t.Context(), f.js, protocol.Subjects{}, run, "test", "done"); err != nil {
		t.Fatal(err)
	}
	f.result(run)
	for len(progress) != 0 {
		if m := <-progress; !isStart(m) {
			t.Errorf("the client got %s", m.Data)
		}
	}
}
