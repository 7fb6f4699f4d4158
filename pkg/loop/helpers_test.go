package loop_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/internal/testsync"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/loop/looptest"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

const (
	echoSchema = `{"type":"object","properties":{"text":{"type":"string"}},"required":["text"],"additionalProperties":false}`
	addSchema  = `{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"}},"required":["a","b"],"additionalProperties":false}`
	openSchema = `{"type":"object"}`
)

// specs returns the usual test catalog: echo, add, sleep, hang, fail.
func specs() []protocol.ToolSpec {
	return []protocol.ToolSpec{
		looptest.MustSpec("echo", echoSchema),
		looptest.MustSpec("add", addSchema),
		looptest.MustSpec("sleep", openSchema),
		looptest.MustSpec("hang", openSchema),
		looptest.MustSpec("fail", openSchema),
	}
}

// handler plays the usual tools: echo returns its text, add its sum, sleep
// waits 200ms, hang never answers, fail fails.
func handler(ctx context.Context, c protocol.Call) (protocol.Result, bool) {
	switch c.Tool {
	case "echo":
		var a struct{ Text string }
		_ = json.Unmarshal(c.Arguments, &a)
		return looptest.OK(a.Text), true
	case "add":
		var a struct{ A, B int }
		_ = json.Unmarshal(c.Arguments, &a)
		b, _ := json.Marshal(a.A + a.B)
		return looptest.OK(string(b)), true
	case "sleep":
		select {
		case <-time.After(200 * time.Millisecond):
			return looptest.OK("slept"), true
		case <-ctx.Done():
			return protocol.Result{Outcome: protocol.OutcomeCancelled}, true
		}
	case "hang":
		return protocol.Result{}, false
	case "fail":
		return looptest.Failed("*errors.errorString"), true
	}
	return protocol.Result{Outcome: protocol.OutcomeUnknownTool}, true
}

// env is one test's runner and fakes.
type env struct {
	runner *loop.Runner
	model  *looptest.Model
	disp   *looptest.Dispatcher
	cat    *looptest.Catalog
	logs   *logBuffer
}

// fastConfig has short grace and cancel bounds, fit for tests.
func fastConfig() loop.Config {
	return loop.Config{Grace: 20 * time.Millisecond, CancelTimeout: time.Second}
}

// newEnv builds a Runner on the given model, the usual catalog and a
// Dispatcher running h (handler when nil). Logs go to a buffer and t.Log.
func newEnv(t testing.TB, cfg loop.Config, model *looptest.Model, h looptest.Handler, gate loop.Gate) *env {
	t.Helper()
	if h == nil {
		h = handler
	}
	e := &env{model: model, disp: looptest.New(h), cat: looptest.NewCatalog(specs()...), logs: &logBuffer{}}
	cfg.Logger = zerolog.New(io.MultiWriter(e.logs, zerolog.NewTestWriter(t))).Level(zerolog.DebugLevel)
	var err error
	e.runner, err = loop.New(cfg, model, e.cat, e.disp, gate)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(e.disp.Wait)
	return e
}

// run runs prompt and checks the invariants every run must keep.
func (e *env) run(t testing.TB, prompt string) (*loop.Result, error) {
	t.Helper()
	res, err := e.runner.Run(t.Context(), prompt)
	if res == nil {
		t.Fatalf("Run returned a nil Result (err %v)", err)
	}
	checkInvariants(t, res)
	return res, err
}

// checkInvariants asserts the run-wide contract: a valid transcript, one
// record per call id in transcript order, and consistent counts.
func checkInvariants(t testing.TB, res *loop.Result) {
	t.Helper()
	if err := looptest.CheckTranscript(res.Messages); err != nil {
		t.Fatalf("transcript invalid: %v", err)
	}
	var ids []string
	for _, m := range res.Messages {
		for _, tc := range m.ToolCalls {
			ids = append(ids, tc.ID)
		}
	}
	if len(res.Calls) > len(ids) {
		t.Fatalf("%d call records for %d tool calls", len(res.Calls), len(ids))
	}
	// The run's own calls are the last len(res.Calls) ids.
	ids = ids[len(ids)-len(res.Calls):]
	total := 0
	for i, c := range res.Calls {
		if c.CallID != ids[i] {
			t.Fatalf("Calls[%d].CallID=%q, want %q", i, c.CallID, ids[i])
		}
		if !c.Outcome.Valid() {
			t.Fatalf("Calls[%d].Outcome=%q is not an outcome", i, c.Outcome)
		}
	}
	for _, n := range res.Metadata.Outcomes {
		total += n
	}
	if total != len(res.Calls) {
		t.Fatalf("outcome counts sum to %d, want %d", total, len(res.Calls))
	}
	if got := res.Metadata.ToolCallsMade + res.Metadata.RejectedToolCalls; got != len(res.Calls) {
		t.Fatalf("tool_calls_made+rejected_tool_calls=%d, want %d", got, len(res.Calls))
	}
}

// toolMessages returns the tool messages of a transcript by call id.
func toolMessages(res *loop.Result) map[string]string {
	out := map[string]string{}
	for _, m := range res.Messages {
		if m.Role == "tool" {
			out[m.ToolCallID] = m.Content
		}
	}
	return out
}

// observation returns the tool message answering the i-th call record.
func observation(t testing.TB, res *loop.Result, i int) string {
	t.Helper()
	obs, ok := toolMessages(res)[res.Calls[i].CallID]
	if !ok {
		t.Fatalf("no tool message for call %d", i)
	}
	return obs
}

// publishedTools lists the tools of the published calls.
func publishedTools(d *looptest.Dispatcher) []string {
	var out []string
	for _, c := range d.Published() {
		out = append(out, string(c.Tool))
	}
	return out
}

// logBuffer keeps the loop's log lines for assertions.
type logBuffer struct{ testsync.Buffer }

// lines parses the log lines whose "event" is ev.
func (b *logBuffer) lines(t testing.TB, ev string) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(b.String()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("log line is not JSON: %q", sc.Text())
		}
		if m["event"] == ev {
			out = append(out, m)
		}
	}
	return out
}

// barrier lets its n parties through only once all n have arrived, so a
// test proves that things run concurrently without a timing threshold: run
// one at a time, the first party waits for others that never come and gives
// up at the deadline.
type barrier struct {
	mu      sync.Mutex
	n       int
	arrived int
	all     chan struct{}
}

func newBarrier(n int) *barrier { return &barrier{n: n, all: make(chan struct{})} }

// wait reports whether all n parties arrived before timeout or ctx ended.
func (b *barrier) wait(ctx context.Context, timeout time.Duration) bool {
	b.mu.Lock()
	b.arrived++
	if b.arrived == b.n {
		close(b.all)
	}
	b.mu.Unlock()
	select {
	case <-b.all:
		return true
	case <-ctx.Done():
		return false
	case <-time.After(timeout):
		return false
	}
}
