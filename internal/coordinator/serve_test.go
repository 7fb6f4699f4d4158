package coordinator_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/internal/coordinator"
	"github.com/toolfleet/toolfleet/internal/embedded"
	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natstest"
	"github.com/toolfleet/toolfleet/internal/testsync"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/model/scripted"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// Scripts of the served models.
const (
	// echoThenAnswer makes one echo call, then answers with its result.
	echoThenAnswer = `{"turns": [
	  {"tool_calls": [{"id": "a", "name": "echo", "arguments": {"text": "hello"}}]},
	  {"content": "echo said {{result \"a\"}}"}
	]}`
	// slowThenAnswer makes one call to the slow exec tool, then answers.
	slowThenAnswer = `{"turns": [
	  {"tool_calls": [{"id": "s", "name": "slow", "arguments": {}}]},
	  {"content": "slow said {{result \"s\"}}"}
	]}`
)

// echoForever calls echo in each of n turns, so a run only ends at
// max_rounds.
func echoForever(n int) string {
	turns := make([]string, n)
	for i := range turns {
		turns[i] = fmt.Sprintf(`{"tool_calls": [{"id": "e%d", "name": "echo", "arguments": {"text": "%d"}}]}`, i, i)
	}
	return `{"turns": [` + strings.Join(turns, ",") + `]}`
}

// serveFleet is a nats-server and a client of it.
type serveFleet struct {
	t   *testing.T
	srv *embedded.Server
	nc  *nats.Conn
	js  jetstream.JetStream
}

func newServeFleet(t *testing.T) *serveFleet {
	t.Helper()
	f := &serveFleet{t: t, srv: natstest.Start(t)}
	f.nc = natstest.Connect(t, f.srv)
	var err error
	if f.js, err = jetstream.New(f.nc); err != nil {
		t.Fatal(err)
	}
	return f
}

// server is one serving coordinator.
type server struct {
	c    *coordinator.Coordinator
	stop func() error // cancels Serve and returns what it returned
	done chan struct{}
}

// serveOpts are the knobs of one serving coordinator.
type serveOpts struct {
	script    string
	loop      loop.Config
	serve     coordinator.ServeConfig
	toolsFile string
	logs      io.Writer // default: the test's log
	metrics   bool      // serve metrics on a free port (server.refused)
}

// start opens a coordinator with one in-process worker (built-in tools plus
// toolsFile's) and serves runs until the test ends or stop is called.
func (f *serveFleet) start(o serveOpts) *server {
	f.t.Helper()
	model, err := scripted.Parse([]byte(o.script))
	if err != nil {
		f.t.Fatal(err)
	}
	cfg := coordinator.Config{
		Conn:   natsbus.ConnConfig{URL: f.srv.ClientURL()},
		Model:  model,
		Loop:   o.loop,
		Logger: zerolog.New(zerolog.NewTestWriter(f.t)).Level(zerolog.InfoLevel),
	}
	if o.logs != nil {
		cfg.Logger = zerolog.New(o.logs).Level(zerolog.DebugLevel)
	}
	cfg.Workers = 1
	cfg.Builtins = []string{"calculator", "echo"}
	cfg.ToolsFile = o.toolsFile
	if o.metrics {
		cfg.MetricsAddr = "127.0.0.1:0"
	}
	c, err := coordinator.Open(f.t.Context(), cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	if o.serve.PollWait == 0 {
		o.serve.PollWait = 100 * time.Millisecond // shutdown waits for the pull in progress
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &server{c: c, done: make(chan struct{})}
	var serveErr error
	go func() {
		defer close(s.done)
		serveErr = c.Serve(ctx, o.serve)
	}()
	var once sync.Once
	s.stop = func() error {
		once.Do(func() {
			cancel()
			<-s.done
			c.Close()
		})
		return serveErr
	}
	f.t.Cleanup(func() { s.stop() })
	return s
}

// submit stores body as a submission of the default client, as "nats
// req" would: the server's acknowledgement accepts it.
func (f *serveFleet) submit(body string) protocol.RunResponse {
	f.t.Helper()
	var resp protocol.RunResponse
	natstest.WaitFor(f.t, 10*time.Second, func() error {
		var err error
		resp, err = coordinator.SubmitRaw(f.t.Context(), f.nc, protocol.Subjects{}, []byte(body))
		return err
	})
	return resp
}

// accepted submits body and returns the accepted run id.
func (f *serveFleet) accepted(body string) protocol.RunID {
	f.t.Helper()
	resp := f.submit(body)
	if resp.Status != protocol.RunAccepted || !resp.RunID.Valid() {
		f.t.Fatalf("reply to %s = %+v, want accepted with a run id", body, resp)
	}
	if resp.ResultSubject != "fleet.run.result.default."+string(resp.RunID) || resp.ResultBucket != "fleet_runs" || resp.ResultKey != "default."+string(resp.RunID) {
		f.t.Fatalf("reply names %q, %q and %q, want fleet.run.result.default.<run>, fleet_runs and default.<run>", resp.ResultSubject, resp.ResultBucket, resp.ResultKey)
	}
	return resp.RunID
}

// result waits for run's stored result.
func (f *serveFleet) result(run protocol.RunID) protocol.RunResult {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(f.t.Context(), 20*time.Second)
	defer cancel()
	res, _, err := coordinator.WaitResult(ctx, f.js, protocol.Subjects{}, protocol.RunKey("default", run))
	if err != nil {
		f.t.Fatal(err)
	}
	if res.RunID != run {
		f.t.Fatalf("result under key %s has run_id %s", run, res.RunID)
	}
	return res
}

// refused submits body and returns the error its stored result gives:
// the coordinator that took it refused it.
func (f *serveFleet) refused(body string) (*protocol.RunError, []byte) {
	f.t.Helper()
	run := f.accepted(body)
	res := f.result(run)
	if res.Error == nil || res.TerminationReason != "" {
		f.t.Fatalf("result of %s = %+v, want refused", body, res)
	}
	_, raw, _ := coordinator.WaitResult(f.t.Context(), f.js, protocol.Subjects{}, protocol.RunKey("default", run))
	return res.Error, raw
}

// queued stores body on the submission subject of submission id, past
// every client-side check, and returns its run id.
func (f *serveFleet) queued(id, body string) protocol.RunID {
	f.t.Helper()
	msg := nats.NewMsg("fleet.run.submit.default.default." + id)
	msg.Data = []byte(body)
	msg.Header.Set(protocol.HeaderMsgID, protocol.SubmissionMsgID("default", id))
	msg.Header.Set(protocol.HeaderAgent, protocol.DefaultAgent)
	if _, err := f.js.PublishMsg(f.t.Context(), msg); err != nil {
		f.t.Fatal(err)
	}
	return protocol.SubmissionRunID("default", id)
}

// consumerIdle waits until the runs consumer holds nothing: no request is
// waiting, unacknowledged or due for redelivery.
func (f *serveFleet) consumerIdle() {
	f.t.Helper()
	natstest.WaitFor(f.t, 10*time.Second, func() error {
		cons, err := f.js.Consumer(f.t.Context(), "FLEET_RUNS", "coordinators")
		if err != nil {
			return err
		}
		info, err := cons.Info(f.t.Context())
		if err != nil {
			return err
		}
		if info.NumPending != 0 || info.NumAckPending != 0 || info.NumRedelivered != 0 {
			return fmt.Errorf("runs consumer: %d waiting, %d unacknowledged, %d redelivered", info.NumPending, info.NumAckPending, info.NumRedelivered)
		}
		return nil
	})
}

func writeSlowTool(t *testing.T, seconds string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tools.json")
	manifest := `{"tools": [{"name": "slow", "description": "sleeps", "parameters": {"type": "object"},
	  "timeout": "20s", "command": ["sleep", "` + seconds + `"]}]}`
	if err := os.WriteFile(path, []byte(manifest), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestServeRunsASubmittedPrompt(t *testing.T) {
	f := newServeFleet(t)
	announced := make(chan *nats.Msg, 8)
	sub, err := f.nc.ChanSubscribe("fleet.run.result.>", announced)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	f.start(serveOpts{script: echoThenAnswer, serve: coordinator.ServeConfig{Name: "c-one"}})

	run := f.accepted(`{"prompt": "say hello"}`)
	res := f.result(run)
	if res.TerminationReason != "natural" || res.Answer != "echo said hello" || res.Error != nil {
		t.Fatalf("result = %+v, want a natural answer", res)
	}
	if res.Coordinator != "c-one" || res.Attempt != 1 {
		t.Fatalf("coordinator %q attempt %d, want c-one and 1", res.Coordinator, res.Attempt)
	}
	if res.Limits == nil || res.Limits.MaxRounds != loop.DefaultMaxRounds || len(res.Clamped) != 0 {
		t.Fatalf("limits %+v clamped %v, want the defaults and nothing clamped", res.Limits, res.Clamped)
	}
	if res.SubmittedAt.IsZero() || res.StartedAt.Before(res.SubmittedAt) || res.FinishedAt.Before(res.StartedAt) {
		t.Fatalf("times: submitted %v started %v finished %v", res.SubmittedAt, res.StartedAt, res.FinishedAt)
	}
	// The loop ran under the served run id: the tool's result travelled on
	// the run's own result subject.
	st, err := f.js.Stream(t.Context(), "FLEET_RESULTS")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.GetLastMsgForSubject(t.Context(), "fleet.result."+string(run)+".echo"); err != nil {
		t.Fatalf("no tool result on fleet.result.%s.echo: %v", run, err)
	}
	// The stored result is the run's --output json object plus the serving
	// fields.
	var lr loop.Result
	_, raw, _ := coordinator.WaitResult(t.Context(), f.js, protocol.Subjects{}, protocol.RunKey("default", run))
	if err := json.Unmarshal(raw, &lr); err != nil || lr.RunID != run || len(lr.Calls) != 1 || len(lr.Messages) != 4 ||
		lr.Calls[0].Outcome != protocol.OutcomeOK || lr.Metadata.Rounds != 2 {
		t.Fatalf("stored result as loop.Result = %+v, %v", lr, err)
	}

	select {
	case m := <-announced:
		if m.Subject != "fleet.run.result.default."+string(run) || string(m.Data) != string(raw) {
			t.Fatalf("announced on %s: %s; want the stored result on fleet.run.result.default.%s", m.Subject, m.Data, run)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the result was not announced")
	}
	f.consumerIdle()
}

func TestServeClampsAndLowersLimits(t *testing.T) {
	f := newServeFleet(t)
	f.start(serveOpts{script: echoForever(20), loop: loop.Config{MaxRounds: 3}})

	res := f.result(f.accepted(`{"prompt": "loop", "max_rounds": 1000000}`))
	if res.TerminationReason != "max_rounds" || res.Limits.MaxRounds != 3 || !slices.Equal(res.Clamped, []string{"max_rounds"}) {
		t.Fatalf("max_rounds 1000000: reason %q limits %+v clamped %v; want max_rounds at the ceiling 3, clamped",
			res.TerminationReason, res.Limits, res.Clamped)
	}
	var md loop.Metadata
	if err := json.Unmarshal(res.Metadata, &md); err != nil || md.Rounds != 3 || md.ModelCalls != 3 {
		t.Fatalf("metadata = %+v, %v; want 3 rounds", md, err)
	}

	res = f.result(f.accepted(`{"prompt": "loop", "max_rounds": 2}`))
	if err := json.Unmarshal(res.Metadata, &md); err != nil || md.Rounds != 2 || res.Limits.MaxRounds != 2 || len(res.Clamped) != 0 {
		t.Fatalf("max_rounds 2: rounds %d limits %+v clamped %v; want 2 rounds, nothing clamped", md.Rounds, res.Limits, res.Clamped)
	}
}

func TestServeRequestAddsApproval(t *testing.T) {
	f := newServeFleet(t)
	f.start(serveOpts{script: echoThenAnswer, loop: loop.Config{ApprovalTimeout: 200 * time.Millisecond}})

	res := f.result(f.accepted(`{"prompt": "say hello", "require_approval": ["echo"]}`))
	var calls []loop.CallRecord
	if err := json.Unmarshal(res.Calls, &calls); err != nil || len(calls) != 1 || calls[0].Outcome != protocol.OutcomeApprovalExpired {
		t.Fatalf("calls = %+v, %v; want echo expired waiting for approval", calls, err)
	}
	if !slices.Equal(res.Limits.RequireApproval, []string{"echo"}) {
		t.Fatalf("recorded require_approval = %v, want [echo]", res.Limits.RequireApproval)
	}
}

func TestServeRequestLowersToolTimeout(t *testing.T) {
	f := newServeFleet(t)
	f.start(serveOpts{script: slowThenAnswer, toolsFile: writeSlowTool(t, "10")})

	res := f.result(f.accepted(`{"prompt": "be quick", "tool_timeout_ms": 1000}`))
	var calls []loop.CallRecord
	if err := json.Unmarshal(res.Calls, &calls); err != nil || len(calls) != 1 || calls[0].Outcome != protocol.OutcomeTimeout {
		t.Fatalf("calls = %+v, %v; want the slow call timed out", calls, err)
	}
	if calls[0].DurationMS > 8000 || res.Limits.ToolTimeoutMS != 1000 {
		t.Fatalf("call took %dms with tool_timeout_ms %d; want the request's 1000ms, not the tool's 20s", calls[0].DurationMS, res.Limits.ToolTimeoutMS)
	}
}

func TestServeContinuesATranscript(t *testing.T) {
	f := newServeFleet(t)
	f.start(serveOpts{script: echoThenAnswer})

	res := f.result(f.accepted(`{"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]}`))
	var msgs []loop.Message
	if err := json.Unmarshal(res.Messages, &msgs); err != nil || res.TerminationReason != "natural" || len(msgs) != 5 || msgs[0].Role != "system" {
		t.Fatalf("reason %q messages %+v (%v); want the transcript continued to a natural answer", res.TerminationReason, msgs, err)
	}

	res = f.result(f.accepted(`{"messages": [{"role": "tool", "tool_call_id": "x", "content": "orphan"}]}`))
	if res.Error == nil || res.Error.Code != protocol.CodeInvalidField || res.Error.Field != "messages" || res.TerminationReason != "" {
		t.Fatalf("invalid transcript: %+v, want an invalid messages error", res)
	}
	f.consumerIdle()
}

func TestServeRefusesBadRequests(t *testing.T) {
	f := newServeFleet(t)
	f.start(serveOpts{script: echoThenAnswer, serve: coordinator.ServeConfig{MaxRequestBytes: 4096}})

	tests := []struct {
		name, body, code, field string
	}{
		{"not JSON", `say hello`, protocol.CodeMalformed, ""},
		{"unknown field", `{"prompt": "hi", "max_round": 3}`, protocol.CodeMalformed, ""},
		{"no prompt", `{"max_rounds": 3}`, protocol.CodeMissingField, "prompt"},
		{"negative limit", `{"prompt": "hi", "max_rounds": -1}`, protocol.CodeInvalidField, "max_rounds"},
		{"version 2", `{"v": 2, "prompt": "hi"}`, protocol.CodeVersion, "v"},
		{"over the size limit", `{"prompt": "` + strings.Repeat("x", 5000) + `"}`, protocol.CodeTooLarge, ""},
		{"empty transcript", `{"messages": []}`, protocol.CodeInvalidField, "messages"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			re, _ := f.refused(tt.body)
			if re.Code != tt.code || re.Field != tt.field || re.Message == "" {
				t.Fatalf("error = %+v, want code %s field %q and a message", re, tt.code, tt.field)
			}
		})
	}
	// Stored results read as typed: no HTML escapes.
	if _, raw := f.refused(`{"prompt": "hi", "max_rounds": -1}`); !strings.Contains(string(raw), `"message":"must be >= 0`) {
		t.Fatalf("raw result = %s, want the message unescaped", raw)
	}
	f.consumerIdle()
}

// TestServeTerminatesMalformedQueuedRequests publishes straight into the
// runs stream, past every client-side check: each malformed request gets
// one error result and is never delivered again.
func TestServeTerminatesMalformedQueuedRequests(t *testing.T) {
	f := newServeFleet(t)
	f.start(serveOpts{script: echoThenAnswer})
	f.accepted(`{"prompt": "warm up"}`) // the stream exists and is served

	runs := map[string]string{
		"badjson":   `{"prompt": `,
		"unknown":   `{"prompt": "hi", "evil": true}`,
		"toolarge":  `{"prompt": "` + strings.Repeat("x", protocol.DefaultMaxRunRequestBytes) + `"}`,
		"negatives": `{"prompt": "hi", "max_tool_calls_per_round": -3}`,
	}
	ids := map[string]protocol.RunID{}
	for id, body := range runs {
		ids[id] = f.queued(id, body)
	}
	for run, id := range ids {
		res := f.result(id)
		if res.Error == nil || res.TerminationReason != "" || res.Coordinator == "" {
			t.Fatalf("%s: result %+v, want an error result", run, res)
		}
	}
	f.consumerIdle()
	cons, err := f.js.Consumer(t.Context(), "FLEET_RUNS", "coordinators")
	if err != nil {
		t.Fatal(err)
	}
	info, err := cons.Info(t.Context())
	if err != nil || info.Delivered.Consumer != uint64(len(runs)+1) {
		t.Fatalf("consumer delivered %d messages (%v), want %d: each once", info.Delivered.Consumer, err, len(runs)+1)
	}
}

func TestTwoServersSplitRunsWithOneResultEach(t *testing.T) {
	t.Parallel() // its own server; it waits on the fleet, not the CPU
	f := newServeFleet(t)
	announced := map[string]int{}
	var mu sync.Mutex
	sub, err := f.nc.Subscribe("fleet.run.result.>", func(m *nats.Msg) {
		mu.Lock()
		announced[strings.TrimPrefix(m.Subject, "fleet.run.result.")]++
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	slow := writeSlowTool(t, "0.1")
	for _, name := range []string{"c1", "c2"} {
		f.start(serveOpts{script: slowThenAnswer, toolsFile: slow,
			serve: coordinator.ServeConfig{Name: name, MaxConcurrentRuns: 2}})
	}
	// Both serve before anything is submitted.
	natstest.WaitFor(t, 10*time.Second, func() error {
		cons, err := f.js.Consumer(t.Context(), "FLEET_RUNS", "coordinators")
		if err != nil {
			return err
		}
		info, err := cons.Info(t.Context())
		if err != nil || info.NumWaiting < 2 {
			return fmt.Errorf("%v pull requests waiting (%v), want 2", info, err)
		}
		return nil
	})

	const n = 12
	ids := make([]protocol.RunID, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { ids[i] = f.accepted(fmt.Sprintf(`{"prompt": "run %d"}`, i)) })
	}
	wg.Wait()
	by := map[string]int{}
	for _, id := range ids {
		res := f.result(id)
		if res.TerminationReason != "natural" || !strings.HasPrefix(res.Answer, "slow said") {
			t.Fatalf("run %s: %+v", id, res)
		}
		by[res.Coordinator]++
	}
	if by["c1"] == 0 || by["c2"] == 0 || by["c1"]+by["c2"] != n {
		t.Fatalf("runs by coordinator = %v, want both to have run some of %d", by, n)
	}
	f.consumerIdle()
	natstest.WaitFor(t, 5*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(announced) != n {
			return fmt.Errorf("%d runs announced, want %d", len(announced), n)
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	for id, k := range announced {
		if k != 1 {
			t.Errorf("run %s announced %d times", id, k)
		}
	}
}

func TestServeShutdown(t *testing.T) {
	// SIGTERM (Serve's context ends) hands the run in flight off instead of
	// cancelling it: with no other coordinator alive it waits in the
	// stream, and the next coordinator resumes it from its journal — the
	// slow call, already published and answered, is neither published nor
	// run again.
	f := newServeFleet(t)
	s := f.start(serveOpts{script: slowThenAnswer, toolsFile: writeSlowTool(t, "0.3"),
		serve: coordinator.ServeConfig{Name: "c1", ShutdownGrace: 10 * time.Second}})
	run := f.accepted(`{"prompt": "slow"}`)
	waitRunStarted(t, f)
	if err := s.stop(); err != nil {
		t.Fatalf("Serve returned %v", err)
	}
	// The coordinator's one reader of the results stream goes with it,
	// not only when the server expires it.
	rs, err := f.js.Stream(t.Context(), "FLEET_RESULTS")
	if err != nil {
		t.Fatal(err)
	}
	if info, err := rs.Info(t.Context()); err != nil || info.State.Consumers != 0 {
		t.Fatalf("results stream after shutdown: %+v (%v), want no consumer", info.State, err)
	}
	// With no coordinator at all, a submission is still accepted: the
	// server stores it.
	later := f.accepted(`{"prompt": "slow"}`)
	if _, err := f.js.KeyValue(t.Context(), "fleet_runs"); err == nil {
		kv, _ := f.js.KeyValue(t.Context(), "fleet_runs")
		if _, err := kv.Get(t.Context(), protocol.RunKey("default", run)); err == nil {
			t.Fatal("the handed-off run has a result before any coordinator resumed it")
		}
	}
	f.start(serveOpts{script: slowThenAnswer, toolsFile: writeSlowTool(t, "0.3"),
		serve: coordinator.ServeConfig{Name: "c2"}})
	res := f.result(run)
	if res.TerminationReason != "natural" || res.Answer != "slow said " || res.Coordinator != "c2" || res.Attempt != 2 {
		t.Fatalf("result %+v, want natural on c2 at attempt 2", res)
	}
	if res := f.result(later); res.TerminationReason != "natural" || res.Attempt != 1 {
		t.Fatalf("run submitted while no coordinator served: %+v, want natural at attempt 1", res)
	}
	f.consumerIdle()
	cons, err := f.js.Consumer(t.Context(), "FLEET_CALLS", "tool_slow")
	if err != nil {
		t.Fatal(err)
	}
	info, err := cons.Info(t.Context())
	if err != nil || info.Delivered.Consumer != 2 {
		t.Fatalf("slow delivered %+v (%v) times, want once per run", info.Delivered, err)
	}
}

// waitRunStarted waits until a worker has taken the slow tool's call: a
// coordinator is running a run. (Generous: on a loaded machine a delivery
// lost to a starved client comes back only after the worker's 5s ack wait.)
func waitRunStarted(t *testing.T, f *serveFleet) {
	t.Helper()
	natstest.WaitFor(t, 30*time.Second, func() error {
		cons, err := f.js.Consumer(t.Context(), "FLEET_CALLS", "tool_slow")
		if err != nil {
			return err
		}
		info, err := cons.Info(t.Context())
		if err != nil || info.Delivered.Consumer != 1 {
			return fmt.Errorf("%v calls of slow delivered (%v), want 1", info, err)
		}
		return nil
	})
}

// TestServeGivesAbandonedRunsAResult takes a request as a coordinator that
// then dies would (never acknowledged), with MaxDeliver 1: the next serving
// coordinator stores an "abandoned" result for it and removes it from the
// stream.
//
// The server says a request is abandoned once, on core NATS, when the ack
// wait of its last delivery ends: the ack wait is long enough for the next
// coordinator to start and listen before then on a loaded machine.
func TestServeGivesAbandonedRunsAResult(t *testing.T) {
	t.Parallel() // its own server; it waits on the fleet, not the CPU
	f := newServeFleet(t)
	sc := coordinator.ServeConfig{AckWait: 5 * time.Second, MaxDeliver: 1}
	first := f.start(serveOpts{script: echoThenAnswer, serve: sc})
	f.result(f.accepted(`{"prompt": "warm up"}`)) // the stream and consumer exist
	if err := first.stop(); err != nil {
		t.Fatal(err)
	}

	dead := f.queued("dead1", `{"prompt": "never finished"}`)
	cons, err := f.js.Consumer(t.Context(), "FLEET_RUNS", "coordinators")
	if err != nil {
		t.Fatal(err)
	}
	m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
	if err != nil || m.Subject() != "fleet.run.queued.default" || m.Headers().Get(protocol.HeaderMsgID) != protocol.SubmissionMsgID("default", "dead1") {
		t.Fatalf("taking the request: %v, %v", m, err)
	}
	// The taker dies: no ack, no heartbeat.

	f.start(serveOpts{script: echoThenAnswer, serve: sc})
	res := f.result(dead)
	if res.Error == nil || res.Error.Code != protocol.CodeAbandoned || res.TerminationReason != "" || res.Attempt != 1 {
		t.Fatalf("result = %+v, want an abandoned error after 1 delivery", res)
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		st, err := f.js.Stream(t.Context(), "FLEET_RUNS")
		if err != nil {
			return err
		}
		info, err := st.Info(t.Context())
		if err != nil || info.State.Msgs != 0 {
			return fmt.Errorf("runs stream holds %v messages (%v), want 0", info, err)
		}
		return nil
	})
}

// TestServeNeverLogsRequests submits prompts, transcripts and bad requests
// carrying a canary: it never reaches the coordinator's log (at debug
// level), nor a refusal's message.
func TestServeNeverLogsRequests(t *testing.T) {
	const canary = "CANARY-serve-5d1e"
	f := newServeFleet(t)
	logs := &testsync.Buffer{}
	s := f.start(serveOpts{script: echoThenAnswer, logs: logs})
	f.result(f.accepted(`{"prompt": "the password is ` + canary + `"}`))
	f.result(f.accepted(`{"messages": [{"role": "system", "content": "` + canary + `"}, {"role": "user", "content": "hi"}]}`))
	for _, bad := range []string{
		`{"prompt": "` + canary + `", "max_rounds": "` + canary + `"}`,
		`{"prompt": "` + canary + `", "require_approval": ["` + canary + `.x"]}`,
		`{"prompt": ` + canary + `}`,
		`{"prompt": "` + canary + `", "extra": 1}`,
	} {
		if re, raw := f.refused(bad); strings.Contains(re.Message, canary) || strings.Contains(string(raw), canary) {
			t.Errorf("result = %s: want refused without the canary", raw)
		}
	}
	if res := f.result(f.queued("bad1", `{"prompt": `+canary+`}`)); res.Error == nil || strings.Contains(res.Error.Message, canary) {
		t.Errorf("queued bad request result = %+v: want an error without the canary", res.Error)
	}
	s.stop()
	if strings.Contains(logs.String(), canary) {
		t.Fatalf("the canary reached the log:\n%s", logs.String())
	}
	if !strings.Contains(logs.String(), "run started") {
		t.Fatalf("the log was not captured:\n%s", logs.String())
	}
}

// TestServeBindsTheClientToItsRun: a run submitted on a client's own
// subject is announced on that client's result subject and kept under its
// name, where a deployment lets only that client read it; the shared
// subject keeps working without a client.
func TestServeBindsTheClientToItsRun(t *testing.T) {
	f := newServeFleet(t)
	announced := make(chan *nats.Msg, 8)
	sub, err := f.nc.ChanSubscribe("fleet.run.result.>", announced)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	f.start(serveOpts{script: echoThenAnswer})

	var resp protocol.RunResponse
	natstest.WaitFor(t, 10*time.Second, func() error {
		var err error
		resp, err = coordinator.SubmitRawAs(t.Context(), f.nc, protocol.Subjects{}, "alice", []byte(`{"prompt": "say hello"}`))
		return err
	})
	if resp.Status != protocol.RunAccepted || resp.ResultKey != "alice."+string(resp.RunID) ||
		resp.ResultSubject != "fleet.run.result.alice."+string(resp.RunID) {
		t.Fatalf("reply = %+v, want accepted under alice.<run> and fleet.run.result.alice.<run>", resp)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	res, _, err := coordinator.WaitResult(ctx, f.js, protocol.Subjects{}, resp.ResultKey)
	if err != nil || res.RunID != resp.RunID || res.TerminationReason != "natural" {
		t.Fatalf("result under %s: %+v %v", resp.ResultKey, res, err)
	}
	kv, err := f.js.KeyValue(t.Context(), "fleet_runs")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get(t.Context(), string(resp.RunID)); err == nil {
		t.Error("the client's result is also under the bare run id")
	}
	select {
	case m := <-announced:
		if m.Subject != resp.ResultSubject {
			t.Errorf("announced on %s, want %s", m.Subject, resp.ResultSubject)
		}
	case <-time.After(10 * time.Second):
		t.Error("no announcement")
	}
}
