package loop_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/toolfleet/toolfleet/internal/testsync"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/loop/looptest"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

func TestSimpleToolCallGivesFinalAnswer(t *testing.T) {
	m := looptest.NewModel(
		looptest.Calls(looptest.Call("c1", "add", `{"a":2,"b":3}`)),
		looptest.Answer("5"),
	)
	e := newEnv(t, fastConfig(), m, nil, nil)
	res, err := e.run(t, "what is 2+3?")
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if res.Answer != "5" || res.TerminationReason != loop.TerminationNatural {
		t.Fatalf("Answer=%q reason=%q, want 5 natural", res.Answer, res.TerminationReason)
	}
	if got := observation(t, res, 0); got != "5" {
		t.Fatalf("observation=%q, want 5", got)
	}
	if res.Metadata.Rounds != 2 || res.Metadata.ToolCallsMade != 1 || res.Metadata.ModelCalls != 2 {
		t.Fatalf("metadata=%+v, want 2 rounds, 1 call, 2 model calls", res.Metadata)
	}
	if res.Calls[0].Worker != "looptest" || res.Calls[0].CallKey == "" || res.Calls[0].Round != 1 {
		t.Fatalf("record=%+v, want worker looptest, a call key, round 1", res.Calls[0])
	}
	if res.RunID == "" || !res.RunID.Valid() {
		t.Fatalf("RunID=%q, want a token", res.RunID)
	}
}

func TestMultiRound(t *testing.T) {
	m := looptest.NewModel(
		looptest.Calls(looptest.Call("c1", "echo", `{"text":"one"}`)),
		looptest.Calls(looptest.Call("c2", "echo", `{"text":"two"}`)),
		looptest.Answer("done"),
	)
	e := newEnv(t, fastConfig(), m, nil, nil)
	res, err := e.run(t, "go")
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if res.Metadata.Rounds != 3 || len(res.Calls) != 2 || res.Calls[1].Round != 2 {
		t.Fatalf("rounds=%d calls=%+v, want 3 rounds, second call in round 2", res.Metadata.Rounds, res.Calls)
	}
	if n := e.disp.Opens(); n != 1 {
		t.Fatalf("Opens=%d, want 1 per run", n)
	}
	reqs := m.Requests()
	if len(reqs) != 3 || len(reqs[2].Messages) != 5 {
		t.Fatalf("third request has %d messages, want 5", len(reqs[2].Messages))
	}
}

func TestCapSurplusCallsNotExecuted(t *testing.T) {
	var calls []loop.ToolCall
	for i := range 5 {
		calls = append(calls, looptest.Call(fmt.Sprintf("tc%d", i), "echo", fmt.Sprintf(`{"text":"v%d"}`, i)))
	}
	m := looptest.NewModel(looptest.Calls(calls...), looptest.Answer("ok"))
	cfg := fastConfig()
	cfg.MaxToolCallsPerRound = 2
	e := newEnv(t, cfg, m, nil, nil)
	res, err := e.run(t, "go")
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	var executed []string
	for _, c := range e.disp.Published() {
		executed = append(executed, string(c.Arguments))
	}
	if want := []string{`{"text":"v0"}`, `{"text":"v1"}`}; fmt.Sprint(sortStrings(executed)) != fmt.Sprint(want) {
		t.Fatalf("executed=%v, want %v", executed, want)
	}
	if res.Metadata.ToolCallsMade != 2 || res.Metadata.RejectedToolCalls != 3 {
		t.Fatalf("made=%d rejected=%d, want 2 and 3", res.Metadata.ToolCallsMade, res.Metadata.RejectedToolCalls)
	}
	obs := toolMessages(res)
	for i := 2; i < 5; i++ {
		got := obs[fmt.Sprintf("tc%d", i)]
		want := "Tool call rejected: this round requested 5 tool calls, exceeding the limit of 2. Retry with fewer calls."
		if got != want {
			t.Fatalf("tc%d observation=%q, want %q", i, got, want)
		}
		if res.Calls[i].Outcome != protocol.OutcomeRejected || res.Calls[i].CallKey != "" {
			t.Fatalf("record %d=%+v, want rejected without a call key", i, res.Calls[i])
		}
	}
	// Rejected calls are not traced.
	if n := len(e.logs.lines(t, "tool_call_start")); n != 2 {
		t.Fatalf("%d tool_call_start lines, want 2", n)
	}
}

func TestCapEveryIDAnswered(t *testing.T) {
	var calls []loop.ToolCall
	for i := range 4 {
		calls = append(calls, looptest.Call(fmt.Sprintf("tc%d", i), "echo", `{"text":"x"}`))
	}
	m := looptest.NewModel(looptest.Calls(calls...), looptest.Answer("ok"))
	cfg := fastConfig()
	cfg.MaxToolCallsPerRound = 1
	e := newEnv(t, cfg, m, nil, nil)
	res, _ := e.run(t, "go")
	obs := toolMessages(res)
	rejected := 0
	for i := range 4 {
		got, ok := obs[fmt.Sprintf("tc%d", i)]
		if !ok {
			t.Fatalf("tc%d has no reply", i)
		}
		if strings.Contains(got, "rejected") {
			rejected++
			if !strings.Contains(got, "limit of 1") {
				t.Fatalf("rejection %q does not name the limit", got)
			}
		}
	}
	if rejected != 3 {
		t.Fatalf("%d rejections, want 3", rejected)
	}
}

func TestCapWithinLimitRejectsNone(t *testing.T) {
	m := looptest.NewModel(looptest.Calls(
		looptest.Call("a", "echo", `{"text":"1"}`),
		looptest.Call("b", "echo", `{"text":"2"}`),
		looptest.Call("c", "echo", `{"text":"3"}`),
	), looptest.Answer("ok"))
	e := newEnv(t, fastConfig(), m, nil, nil)
	res, _ := e.run(t, "go")
	if res.Metadata.RejectedToolCalls != 0 || res.Metadata.ToolCallsMade != 3 {
		t.Fatalf("rejected=%d made=%d, want 0 and 3", res.Metadata.RejectedToolCalls, res.Metadata.ToolCallsMade)
	}
}

func TestCallsRunConcurrently(t *testing.T) {
	// The seed's test: three 200ms calls finish well under 600ms. Here each
	// call is held until all three run at once, which proves concurrency
	// without a timing threshold (a loaded CI machine cannot fail it);
	// dispatched one at a time, the first call would wait alone and fail.
	running := newBarrier(3)
	h := func(ctx context.Context, c protocol.Call) (protocol.Result, bool) {
		if !running.wait(ctx, 10*time.Second) {
			return looptest.Failed("serial"), true
		}
		select {
		case <-time.After(200 * time.Millisecond):
		case <-ctx.Done():
		}
		return looptest.OK("slept"), true
	}
	m := looptest.NewModel(looptest.Calls(
		looptest.Call("a", "sleep", `{}`),
		looptest.Call("b", "sleep", `{}`),
		looptest.Call("c", "sleep", `{}`),
	), looptest.Answer("ok"))
	cfg := fastConfig()
	cfg.ToolTimeout = 20 * time.Second
	e := newEnv(t, cfg, m, h, nil)
	start := time.Now()
	res, err := e.run(t, "go")
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if res.Metadata.Outcomes[protocol.OutcomeOK] != 3 {
		t.Fatalf("outcomes=%v, want 3 ok (the three calls must run at the same time)", res.Metadata.Outcomes)
	}
	t.Logf("3 × 200ms calls took %v", time.Since(start))
}

func TestFailingCallDoesNotDisturbSiblings(t *testing.T) {
	m := looptest.NewModel(looptest.Calls(
		looptest.Call("a", "echo", `{"text":"left"}`),
		looptest.Call("b", "fail", `{}`),
		looptest.Call("c", "echo", `{"text":"right"}`),
	), looptest.Answer("ok"))
	e := newEnv(t, fastConfig(), m, nil, nil)
	res, err := e.run(t, "go")
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	obs := toolMessages(res)
	if obs["a"] != "left" || obs["c"] != "right" {
		t.Fatalf("siblings=%q,%q, want left,right", obs["a"], obs["c"])
	}
	if want := "Tool 'fail' failed: *errors.errorString"; obs["b"] != want {
		t.Fatalf("failed observation=%q, want %q", obs["b"], want)
	}
	if res.Calls[1].ErrorType != "*errors.errorString" || res.Calls[0].ErrorType != "" {
		t.Fatalf("error types %q %q, want only the failed call's", res.Calls[0].ErrorType, res.Calls[1].ErrorType)
	}
	if res.Metadata.ToolCallsMade != 3 || res.Calls[1].Outcome != protocol.OutcomeFailed {
		t.Fatalf("made=%d outcome=%q, want 3 and failed", res.Metadata.ToolCallsMade, res.Calls[1].Outcome)
	}
}

func TestUnknownTool(t *testing.T) {
	tests := []struct {
		name, tool, want string
	}{
		{"not in catalog", "nope", "Error: Unknown tool 'nope'"},
		{"not a valid name", "echo.x", "Error: Unknown tool 'echo.x'"},
		{"control and quote", "a\x00b'c\u200b", `Error: Unknown tool 'a\x00b\'c\u200b'`},
		{"invalid utf8", "a\xffb", `Error: Unknown tool 'a\xffb'`},
		{"long", strings.Repeat("é", 100), "Error: Unknown tool '" + strings.Repeat("é", 64) + "…'"},
		{"empty", "", "Error: Unknown tool ''"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := looptest.NewModel(looptest.Calls(looptest.Call("c1", tt.tool, `{}`)), looptest.Answer("ok"))
			e := newEnv(t, fastConfig(), m, nil, nil)
			res, err := e.run(t, "go")
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			if got := observation(t, res, 0); got != tt.want {
				t.Fatalf("observation=%q, want %q", got, tt.want)
			}
			if res.Calls[0].Outcome != protocol.OutcomeUnknownTool || res.Metadata.ToolCallsMade != 1 {
				t.Fatalf("outcome=%q made=%d, want unknown_tool and 1", res.Calls[0].Outcome, res.Metadata.ToolCallsMade)
			}
			if n := len(e.disp.Published()); n != 0 {
				t.Fatalf("%d calls published, want none", n)
			}
		})
	}
}

func TestInvalidArguments(t *testing.T) {
	tests := []struct {
		name, tool, args string
		wantIn           string
	}{
		{"missing required", "add", `{"a":1}`, "missing property 'b'"},
		{"extra property", "add", `{"a":1,"b":2,"c":3}`, "additional properties 'c' not allowed"},
		{"wrong type", "add", `{"a":"one","b":2}`, "/a"},
		{"bool as integer", "add", `{"a":true,"b":2}`, "/a"},
		{"float as integer", "add", `{"a":1.5,"b":2}`, "/a"},
		{"not JSON", "add", `{"a":1,`, "arguments are not valid JSON"},
		{"trailing garbage", "add", `{"a":1,"b":2} x`, "arguments are not valid JSON"},
		{"array", "add", `[1,2]`, "arguments must be a JSON object"},
		{"string", "add", `"hi"`, "arguments must be a JSON object"},
		{"null", "add", `null`, "arguments must be a JSON object"},
		{"empty means {}", "add", ``, "missing properties 'a', 'b'"},
		{"too large", "echo", `{"text":"` + strings.Repeat("x", loop.MaxArgumentsBytes) + `"}`, "arguments are too large"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := looptest.NewModel(looptest.Calls(looptest.Call("c1", tt.tool, tt.args)), looptest.Answer("ok"))
			e := newEnv(t, fastConfig(), m, nil, nil)
			res, err := e.run(t, "go")
			if err != nil {
				t.Fatalf("Run: %v (invalid arguments must be an observation)", err)
			}
			got := observation(t, res, 0)
			if !strings.HasPrefix(got, "Tool '"+tt.tool+"' argument error: ") || !strings.Contains(got, tt.wantIn) {
				t.Fatalf("observation=%q, want an argument error containing %q", got, tt.wantIn)
			}
			if res.Calls[0].Outcome != protocol.OutcomeInvalidArguments || res.Metadata.ToolCallsMade != 1 {
				t.Fatalf("outcome=%q made=%d", res.Calls[0].Outcome, res.Metadata.ToolCallsMade)
			}
			if n := len(e.disp.Published()); n != 0 {
				t.Fatalf("%d calls published, want none", n)
			}
			if res.TerminationReason != loop.TerminationNatural {
				t.Fatalf("reason=%q, want natural: the loop goes on", res.TerminationReason)
			}
		})
	}
}

func TestValidArgumentsReachToolCanonical(t *testing.T) {
	m := looptest.NewModel(looptest.Calls(
		looptest.Call("c1", "add", `{ "b": 2, "a": 1 }`),
		looptest.Call("c2", "sleep", ``),
	), looptest.Answer("ok"))
	e := newEnv(t, fastConfig(), m, nil, nil)
	res, _ := e.run(t, "go")
	pub := e.disp.Published()
	if len(pub) != 2 {
		t.Fatalf("%d published, want 2", len(pub))
	}
	byTool := map[protocol.ToolName]protocol.Call{}
	for _, c := range pub {
		byTool[c.Tool] = c
	}
	if got := string(byTool["add"].Arguments); got != `{"a":1,"b":2}` {
		t.Fatalf("published arguments=%s, want canonical {\"a\":1,\"b\":2}", got)
	}
	if got := string(byTool["sleep"].Arguments); got != `{}` {
		t.Fatalf("empty arguments published as %s, want {}", got)
	}
	if observation(t, res, 0) != "3" {
		t.Fatalf("add observation=%q, want 3", observation(t, res, 0))
	}
	c := byTool["add"]
	if c.V != 1 || c.RunID != res.RunID || c.Round != 1 || c.Attempt != 1 || c.CallID != "c1" ||
		c.MaxOutputChars != loop.DefaultMaxObservationChars || c.CallKey != res.Calls[0].CallKey {
		t.Fatalf("published call=%+v does not match the run", c)
	}
}

func TestTimeoutWorkerNeverAnswers(t *testing.T) {
	m := looptest.NewModel(looptest.Calls(looptest.Call("c1", "hang", `{}`)), looptest.Answer("ok"))
	cfg := fastConfig()
	cfg.ToolTimeout = 40 * time.Millisecond
	e := newEnv(t, cfg, m, nil, nil)
	start := time.Now()
	res, err := e.run(t, "go")
	elapsed := time.Since(start)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if want := "Tool 'hang' timed out after 40ms"; observation(t, res, 0) != want {
		t.Fatalf("observation=%q, want %q", observation(t, res, 0), want)
	}
	if res.Calls[0].Outcome != protocol.OutcomeTimeout {
		t.Fatalf("outcome=%q, want timeout", res.Calls[0].Outcome)
	}
	if elapsed < 60*time.Millisecond || elapsed > 2*time.Second {
		t.Fatalf("run took %v, want about deadline (40ms) + grace (20ms)", elapsed)
	}
	cancels := e.disp.Cancels()
	if len(cancels) != 1 || cancels[0].CallKey != res.Calls[0].CallKey || cancels[0].Reason != "timeout" {
		t.Fatalf("cancels=%+v, want one for the timed-out call", cancels)
	}
}

func TestToolTimeoutSelection(t *testing.T) {
	slow := looptest.MustSpec("slow", openSchema)
	slow.TimeoutMS = 5000
	tests := []struct {
		name     string
		override time.Duration
		tool     string
		want     time.Duration
	}{
		{"tool's own", 0, "slow", 5 * time.Second},
		{"default when the tool has none", 0, "echo", loop.DefaultToolTimeout},
		{"override wins", 3 * time.Second, "slow", 3 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := looptest.NewModel(looptest.Calls(looptest.Call("c1", tt.tool, `{"text":"x"}`)), looptest.Answer("ok"))
			cfg := fastConfig()
			cfg.ToolTimeout = tt.override
			now := time.Now() // frozen: deadlines are exactly now+timeout
			var mu sync.Mutex
			cfg.Now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
			e := newEnv(t, cfg, m, func(ctx context.Context, c protocol.Call) (protocol.Result, bool) {
				return looptest.OK("x"), true
			}, nil)
			e.cat.Specs = append(e.cat.Specs, slow)
			e.run(t, "go")
			pub := e.disp.Published()
			if len(pub) != 1 {
				t.Fatalf("%d published", len(pub))
			}
			if got := pub[0].Deadline.Sub(now); got != tt.want {
				t.Fatalf("deadline is now+%v, want now+%v", got, tt.want)
			}
		})
	}
}

func TestTruncationCounted(t *testing.T) {
	m := looptest.NewModel(looptest.Calls(looptest.Call("c1", "echo", `{"text":"`+strings.Repeat("ü", 500)+`"}`)), looptest.Answer("ok"))
	cfg := fastConfig()
	cfg.MaxObservationChars = 100
	e := newEnv(t, cfg, m, nil, nil)
	res, _ := e.run(t, "go")
	obs := observation(t, res, 0)
	if res.Metadata.TruncatedObservations != 1 || res.Metadata.Rounds != 2 {
		t.Fatalf("truncated=%d rounds=%d, want 1 and 2", res.Metadata.TruncatedObservations, res.Metadata.Rounds)
	}
	if n := utf8.RuneCountInString(obs); n != 100 || !strings.HasSuffix(obs, protocol.TruncationMarker) || !utf8.ValidString(obs) {
		t.Fatalf("observation has %d runes (valid %v), want 100 ending in the marker", n, utf8.ValidString(obs))
	}
	if e.disp.Published()[0].MaxOutputChars != 100 {
		t.Fatalf("MaxOutputChars=%d, want 100", e.disp.Published()[0].MaxOutputChars)
	}
}

func TestWorkerTruncationCounted(t *testing.T) {
	m := looptest.NewModel(looptest.Calls(looptest.Call("c1", "echo", `{"text":"x"}`)), looptest.Answer("ok"))
	e := newEnv(t, fastConfig(), m, func(ctx context.Context, c protocol.Call) (protocol.Result, bool) {
		return protocol.Result{Outcome: protocol.OutcomeOK, Output: "abc" + protocol.TruncationMarker, Truncated: true}, true
	}, nil)
	res, _ := e.run(t, "go")
	if res.Metadata.TruncatedObservations != 1 {
		t.Fatalf("truncated=%d, want 1", res.Metadata.TruncatedObservations)
	}
}

func TestMaxRounds(t *testing.T) {
	tests := []struct {
		name string
		tool string
		args string
	}{
		{"tool keeps being called", "echo", `{"text":"again"}`},
		{"unknown tool keeps being called", "nope", `{}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := 0
			m := looptest.ModelFunc(func(req loop.Request) (*loop.Response, error) {
				n++
				return &loop.Response{Message: loop.Message{Role: "assistant",
					ToolCalls: []loop.ToolCall{looptest.Call(fmt.Sprintf("c%d", n), tt.tool, tt.args)}}}, nil
			})
			cfg := fastConfig()
			cfg.MaxRounds = 3
			e := newEnv(t, cfg, m, nil, nil)
			res, err := e.run(t, "go")
			if err != nil {
				t.Fatalf("Run: %v, want nil for max_rounds", err)
			}
			if res.TerminationReason != loop.TerminationMaxRounds || res.Metadata.Rounds != 3 || res.Answer != "" {
				t.Fatalf("reason=%q rounds=%d answer=%q", res.TerminationReason, res.Metadata.Rounds, res.Answer)
			}
			if len(res.Messages) != 1+3*2 || len(res.Calls) != 3 {
				t.Fatalf("%d messages and %d calls, want 7 and 3: the transcript is kept", len(res.Messages), len(res.Calls))
			}
		})
	}
}

func TestNoTools(t *testing.T) {
	m := looptest.NewModel(looptest.Answer("hello"))
	e := newEnv(t, fastConfig(), m, nil, nil)
	e.cat.Specs = nil
	res, err := e.run(t, "hi")
	if err != nil || res.Answer != "hello" || res.TerminationReason != loop.TerminationNatural {
		t.Fatalf("res=%+v err=%v", res, err)
	}
	if len(m.Requests()[0].Tools) != 0 || len(res.Calls) != 0 || e.disp.Opens() != 0 {
		t.Fatalf("tools=%d calls=%d opens=%d, want none", len(m.Requests()[0].Tools), len(res.Calls), e.disp.Opens())
	}
	if len(res.Messages) != 2 || res.Messages[1].Role != "assistant" {
		t.Fatalf("messages=%+v, want prompt and answer", res.Messages)
	}
}

func TestUsageCounted(t *testing.T) {
	t1 := looptest.Calls(looptest.Call("c1", "echo", `{"text":"x"}`))
	t1.Usage = loop.Usage{PromptTokens: 10, CompletionTokens: 3}
	t2 := looptest.Answer("ok")
	t2.Usage = loop.Usage{PromptTokens: 20, CompletionTokens: 4}
	e := newEnv(t, fastConfig(), looptest.NewModel(t1, t2), nil, nil)
	res, _ := e.run(t, "go")
	md := res.Metadata
	if md.PromptTokens != 30 || md.CompletionTokens != 7 || md.ModelCalls != 2 {
		t.Fatalf("metadata=%+v, want 30/7 tokens and 2 model calls", md)
	}
}

func TestThousandCallsInOneRound(t *testing.T) {
	var calls []loop.ToolCall
	for i := range 1000 {
		calls = append(calls, looptest.Call(fmt.Sprintf("tc%d", i), "echo", `{"text":"x"}`))
	}
	m := looptest.NewModel(looptest.Calls(calls...), looptest.Answer("ok"))
	var mu sync.Mutex
	peak := 0
	h := func(ctx context.Context, c protocol.Call) (protocol.Result, bool) {
		mu.Lock()
		peak = max(peak, runtime.NumGoroutine())
		mu.Unlock()
		return looptest.OK("x"), true
	}
	cfg := fastConfig()
	cfg.MaxToolCallsKept = 2000 // all 1000 kept and answered
	e := newEnv(t, cfg, m, h, nil)
	baseline := runtime.NumGoroutine()
	res, err := e.run(t, "go")
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if res.Metadata.ToolCallsMade != 32 || res.Metadata.RejectedToolCalls != 968 || len(e.disp.Published()) != 32 {
		t.Fatalf("made=%d rejected=%d published=%d, want 32/968/32",
			res.Metadata.ToolCallsMade, res.Metadata.RejectedToolCalls, len(e.disp.Published()))
	}
	if len(toolMessages(res)) != 1000 {
		t.Fatalf("%d tool messages, want 1000", len(toolMessages(res)))
	}
	// At most one goroutine per executed call in each phase, plus the
	// Dispatcher's handlers.
	if bound := baseline + 2*32 + 8; peak > bound {
		t.Fatalf("peak goroutines %d, want <= %d", peak, bound)
	}
	e.disp.Wait()
	testsync.WaitUntil(t, 2*time.Second, "goroutines back to baseline", func() bool { return runtime.NumGoroutine() <= baseline })
}

func TestCallIDs(t *testing.T) {
	long := strings.Repeat("i", protocol.MaxCallIDLen+1)
	m := looptest.NewModel(
		looptest.Calls(
			looptest.Call("a", "echo", `{"text":"first"}`),
			looptest.Call("a", "echo", `{"text":"repeat"}`),
			looptest.Call("", "echo", `{"text":"empty"}`),
			looptest.Call(long, "echo", `{"text":"long"}`),
		),
		looptest.Calls(looptest.Call("a", "echo", `{"text":"next round"}`)),
		looptest.Answer("ok"),
	)
	e := newEnv(t, fastConfig(), m, nil, nil)
	res, err := e.run(t, "go")
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	var texts []string
	for _, c := range e.disp.Published() {
		texts = append(texts, string(c.Arguments))
	}
	want := []string{`{"text":"first"}`, `{"text":"empty"}`, `{"text":"long"}`, `{"text":"next round"}`}
	if fmt.Sprint(sortStrings(texts)) != fmt.Sprint(sortStrings(want)) {
		t.Fatalf("executed %v, want %v: a repeat never runs", texts, want)
	}
	if res.Calls[0].CallID != "a" {
		t.Fatalf("first id=%q, want it kept", res.Calls[0].CallID)
	}
	for i := 1; i < 5; i++ {
		if id := res.Calls[i].CallID; !strings.HasPrefix(id, "call_") || len(id) > protocol.MaxCallIDLen {
			t.Fatalf("call %d id=%q, want a coordinator-made id", i, id)
		}
	}
	if got, want := observation(t, res, 1), "Tool call rejected: call id 'a' repeats an earlier call in this round."; got != want {
		t.Fatalf("repeat observation=%q, want %q", got, want)
	}
	if res.Calls[1].Outcome != protocol.OutcomeRejected || res.Metadata.RejectedToolCalls != 1 || res.Metadata.ToolCallsMade != 4 {
		t.Fatalf("repeat=%q rejected=%d made=%d", res.Calls[1].Outcome, res.Metadata.RejectedToolCalls, res.Metadata.ToolCallsMade)
	}
}

func TestRunMessagesCopiesInput(t *testing.T) {
	in := []loop.Message{
		{Role: "system", Content: "be brief"},
		{Role: "user", Content: "hi"},
		{Role: "assistant", ToolCalls: []loop.ToolCall{looptest.Call("old", "echo", `{"text":"x"}`)}},
		{Role: "tool", ToolCallID: "old", Content: "x"},
		{Role: "user", Content: "again"},
	}
	before := fmt.Sprintf("%+v", in)
	m := looptest.NewModel(looptest.Calls(looptest.Call("old", "echo", `{"text":"y"}`)), looptest.Answer("ok"))
	e := newEnv(t, fastConfig(), m, nil, nil)
	res, err := e.runner.RunMessages(t.Context(), in)
	if err != nil {
		t.Fatalf("RunMessages: %v", err)
	}
	checkInvariants(t, res)
	if fmt.Sprintf("%+v", in) != before {
		t.Fatal("RunMessages mutated its input")
	}
	if len(res.Calls) != 1 || res.Calls[0].CallID == "old" {
		t.Fatalf("calls=%+v, want one call with the reused id replaced", res.Calls)
	}
}

func TestBadInputRefused(t *testing.T) {
	e := newEnv(t, fastConfig(), looptest.NewModel(), nil, nil)
	tests := []struct {
		name string
		msgs []loop.Message
	}{
		{"empty", nil},
		{"bad role", []loop.Message{{Role: "wizard", Content: "x"}}},
		{"answered twice", []loop.Message{{Role: "user", Content: "x"}, {Role: "assistant", ToolCalls: []loop.ToolCall{looptest.Call("a", "echo", "{}")}}, {Role: "tool", ToolCallID: "a"}, {Role: "tool", ToolCallID: "a"}}},
		{"orphan tool message", []loop.Message{{Role: "user", Content: "x"}, {Role: "tool", ToolCallID: "a"}}},
		{"empty call id", []loop.Message{{Role: "assistant", ToolCalls: []loop.ToolCall{looptest.Call("", "echo", "{}")}}, {Role: "tool"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := e.runner.RunMessages(t.Context(), tt.msgs)
			if res != nil || !errors.Is(err, loop.ErrInvalidInput) {
				t.Fatalf("res=%v err=%v, want nil and ErrInvalidInput", res, err)
			}
		})
	}
	if res, err := e.runner.Run(t.Context(), "  "); res != nil || !errors.Is(err, loop.ErrInvalidInput) {
		t.Fatalf("empty prompt: res=%v err=%v", res, err)
	}
	if n := len(e.model.Requests()); n != 0 {
		t.Fatalf("model called %d times for bad input", n)
	}
}

func TestModelError(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name      string
		turns     []looptest.Turn
		wantCalls int
	}{
		{"first round", []looptest.Turn{{Err: boom}}, 0},
		{"after a round of calls", []looptest.Turn{
			looptest.Calls(looptest.Call("a", "echo", `{"text":"x"}`), looptest.Call("b", "hang", `{}`)),
			{Err: boom},
		}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := fastConfig()
			cfg.ToolTimeout = 20 * time.Millisecond
			e := newEnv(t, cfg, looptest.NewModel(tt.turns...), nil, nil)
			res, err := e.run(t, "go")
			if !errors.Is(err, boom) {
				t.Fatalf("err=%v, want it to wrap the model's error", err)
			}
			if res.TerminationReason != loop.TerminationError || len(res.Calls) != tt.wantCalls {
				t.Fatalf("reason=%q calls=%d, want error and %d", res.TerminationReason, len(res.Calls), tt.wantCalls)
			}
			if res.Metadata.ModelCalls != len(tt.turns) {
				t.Fatalf("model_calls=%d, want %d", res.Metadata.ModelCalls, len(tt.turns))
			}
		})
	}
}

func TestCatalogError(t *testing.T) {
	boom := errors.New("kv down")
	e := newEnv(t, fastConfig(), looptest.NewModel(looptest.Answer("x")), nil, nil)
	e.cat.Err = boom
	res, err := e.run(t, "go")
	if !errors.Is(err, boom) || res.TerminationReason != loop.TerminationError {
		t.Fatalf("err=%v reason=%q, want the catalog error and reason error", err, res.TerminationReason)
	}
}

func TestCatalogSkipsUnusableSpecs(t *testing.T) {
	lying := looptest.MustSpec("lying", openSchema)
	lying.Parameters = []byte(`{"type":"object","properties":{"x":{"type":"string"}}}`)
	broken := looptest.MustSpec("broken", `{"type":"object","properties":{"x":{"type":"nonsense"}}}`)
	dupe := looptest.MustSpec("echo", openSchema)
	m := looptest.NewModel(looptest.Calls(
		looptest.Call("a", "lying", `{}`),
		looptest.Call("b", "broken", `{}`),
		looptest.Call("c", "echo", `{}`), // the first "echo" wins: its schema needs text
	), looptest.Answer("ok"))
	e := newEnv(t, fastConfig(), m, nil, nil)
	e.cat.Specs = append(e.cat.Specs, lying, broken, dupe)
	res, _ := e.run(t, "go")
	var offered []string
	for _, d := range m.Requests()[0].Tools {
		offered = append(offered, d.Name)
	}
	if fmt.Sprint(offered) != "[echo add sleep hang fail]" {
		t.Fatalf("offered %v, want only the usable specs", offered)
	}
	got := []protocol.Outcome{res.Calls[0].Outcome, res.Calls[1].Outcome, res.Calls[2].Outcome}
	want := []protocol.Outcome{protocol.OutcomeUnknownTool, protocol.OutcomeUnknownTool, protocol.OutcomeInvalidArguments}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("outcomes=%v, want %v", got, want)
	}
}

func TestDispatchFailures(t *testing.T) {
	tests := []struct {
		name  string
		setup func(*looptest.Dispatcher)
	}{
		{"publish refused", func(d *looptest.Dispatcher) {
			d.PublishErr = func(c protocol.Call) error { return errors.New("no responders") }
		}},
		{"open refused", func(d *looptest.Dispatcher) { d.OpenErr = errors.New("no connection") }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := looptest.NewModel(looptest.Calls(looptest.Call("a", "echo", `{"text":"x"}`)), looptest.Answer("ok"))
			e := newEnv(t, fastConfig(), m, nil, nil)
			tt.setup(e.disp)
			res, err := e.run(t, "go")
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			want := "Tool 'echo' failed: dispatch error (the call was not sent and did not run)"
			if got := observation(t, res, 0); got != want || res.Calls[0].Outcome != protocol.OutcomeFailed || res.Calls[0].ErrorType != "dispatch" {
				t.Fatalf("observation=%q outcome=%q, want %q failed", got, res.Calls[0].Outcome, want)
			}
		})
	}
}

func TestCancelMidRound(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	m := looptest.NewModel(looptest.Calls(
		looptest.Call("a", "echo", `{"text":"x"}`),
		looptest.Call("b", "block", `{}`),
		looptest.Call("c", "block", `{}`),
	), looptest.Answer("never"))
	started := make(chan struct{}, 2)
	h := func(hctx context.Context, c protocol.Call) (protocol.Result, bool) {
		if c.Tool != "block" {
			return handler(hctx, c)
		}
		started <- struct{}{}
		<-hctx.Done() // until the loop's Cancel (or the deadline)
		return protocol.Result{}, false
	}
	cfg := fastConfig()
	cfg.ToolTimeout = 10 * time.Second
	e := newEnv(t, cfg, m, h, nil)
	e.cat.Specs = append(e.cat.Specs, looptest.MustSpec("block", openSchema))
	rec := &cancelRecorder{Dispatcher: e.disp}
	r, err := loop.New(cfg, m, e.cat, rec, nil)
	if err != nil {
		t.Fatal(err)
	}
	go func() { <-started; <-started; cancel() }()
	start := time.Now()
	res, err := r.Run(ctx, "go")
	if err != nil || res == nil {
		t.Fatalf("Run: res=%v err=%v, want a result and no error", res, err)
	}
	checkInvariants(t, res)
	if time.Since(start) > 5*time.Second {
		t.Fatal("cancellation waited for the tool timeout")
	}
	if res.TerminationReason != loop.TerminationCancelled || len(res.Calls) != 3 {
		t.Fatalf("reason=%q calls=%d, want cancelled and 3", res.TerminationReason, len(res.Calls))
	}
	for _, i := range []int{1, 2} {
		if res.Calls[i].Outcome != protocol.OutcomeCancelled || observation(t, res, i) != "Tool 'block' was cancelled" {
			t.Fatalf("call %d: %q %q", i, res.Calls[i].Outcome, observation(t, res, i))
		}
	}
	keys := map[protocol.CallKey]bool{}
	for _, c := range rec.Cancels() {
		keys[c.CallKey] = true
		if c.Reason != "run_cancelled" {
			t.Fatalf("cancel reason=%q, want run_cancelled", c.Reason)
		}
	}
	if !keys[res.Calls[1].CallKey] || !keys[res.Calls[2].CallKey] {
		t.Fatalf("cancels=%+v, want one for each blocked call", rec.Cancels())
	}
	if errs := rec.ctxErrs(); len(errs) == 0 || errs[0] != nil {
		t.Fatalf("Cancel context errors %v, want a live context", errs)
	}
	if n := len(m.Requests()); n != 1 {
		t.Fatalf("model called %d times after cancel, want 1", n)
	}
}

func TestCancelledBeforeStart(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	e := newEnv(t, fastConfig(), looptest.NewModel(looptest.Answer("x")), nil, nil)
	res, err := e.runner.Run(ctx, "go")
	if err != nil || res == nil || res.TerminationReason != loop.TerminationCancelled {
		t.Fatalf("res=%+v err=%v, want reason cancelled and no error", res, err)
	}
}

// cancelRecorder records whether Cancel got a live context.
type cancelRecorder struct {
	*looptest.Dispatcher
	mu   sync.Mutex
	errs []error
}

func (c *cancelRecorder) Cancel(ctx context.Context, m protocol.Cancel) error {
	c.mu.Lock()
	c.errs = append(c.errs, ctx.Err())
	c.mu.Unlock()
	return c.Dispatcher.Cancel(ctx, m)
}

func (c *cancelRecorder) ctxErrs() []error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]error(nil), c.errs...)
}

func sortStrings(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}
