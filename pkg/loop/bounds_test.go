package loop_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/loop/looptest"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

func TestCallsPastTheKeptCeilingAreDropped(t *testing.T) {
	var calls []loop.ToolCall
	for i := range 1000 {
		calls = append(calls, looptest.Call(fmt.Sprintf("tc%d", i), "echo", `{"text":"x"}`))
	}
	m := looptest.NewModel(looptest.Calls(calls...), looptest.Answer("ok"))
	e := newEnv(t, fastConfig(), m, nil, nil)
	res, err := e.run(t, "go")
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	md := res.Metadata
	if md.ToolCallsMade != 32 || md.RejectedToolCalls != loop.DefaultMaxToolCallsKept-32 || md.DroppedToolCalls != 1000-loop.DefaultMaxToolCallsKept {
		t.Fatalf("metadata %+v, want 32 made, %d rejected, %d dropped", md, loop.DefaultMaxToolCallsKept-32, 1000-loop.DefaultMaxToolCallsKept)
	}
	if got := len(res.Messages[1].ToolCalls); got != loop.DefaultMaxToolCallsKept {
		t.Fatalf("the stored assistant message keeps %d calls, want %d", got, loop.DefaultMaxToolCallsKept)
	}
	notes := 0
	for _, text := range toolMessages(res) {
		if strings.Contains(text, "872 further calls were dropped") {
			notes++
		}
		if !strings.Contains(text, "1000 tool calls") && !strings.HasPrefix(text, "x") {
			t.Errorf("observation %q", text)
		}
	}
	if notes != 1 {
		t.Fatalf("%d notes about the dropped calls, want 1", notes)
	}
}

// hostileModel answers every request with calls fresh calls, and checks
// each transcript as a real API would. It keeps nothing of the requests.
type hostileModel struct {
	calls   int
	measure bool // measure the live heap at each call (a GC each time)
	mu      sync.Mutex
	n       int
	peak    uint64 // the largest live heap seen at a model call, after a GC
	bad     error
}

func (h *hostileModel) Complete(ctx context.Context, req loop.Request) (*loop.Response, error) {
	if err := looptest.CheckTranscript(req.Messages); err != nil {
		h.mu.Lock()
		h.bad = err
		h.mu.Unlock()
		return nil, err
	}
	h.mu.Lock()
	h.n++
	round := h.n
	h.mu.Unlock()
	if h.measure {
		// The previous response and this request are live here.
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		h.mu.Lock()
		h.peak = max(h.peak, ms.HeapAlloc)
		h.mu.Unlock()
	}
	calls := make([]loop.ToolCall, h.calls)
	for i := range calls {
		calls[i] = looptest.Call(fmt.Sprintf("r%dc%d", round, i), "echo", `{"text":"hello hostile world"}`)
	}
	return &loop.Response{Message: loop.Message{Role: "assistant", ToolCalls: calls}, FinishReason: "tool_calls"}, nil
}

// An attack: a model answers 70,000 calls every round. The run's memory
// stays bounded: the transcript keeps MaxToolCallsKept calls a round, and
// every id it keeps is answered exactly once (the model checks each
// transcript).
func TestHostileModelKeepsMemoryBounded(t *testing.T) {
	m := &hostileModel{calls: 70_000, measure: true}
	cfg := fastConfig()
	cfg.Logger = zerolog.Nop()
	r, err := loop.New(cfg, m, looptest.NewCatalog(specs()...), looptest.New(handler), nil)
	if err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	res, err := r.Run(t.Context(), "go")
	if err != nil || res.TerminationReason != loop.TerminationMaxRounds {
		t.Fatalf("Run: %v, %v; want max_rounds", res.TerminationReason, err)
	}
	checkInvariants(t, res)
	if m.bad != nil {
		t.Fatalf("the model saw an invalid transcript: %v", m.bad)
	}
	if got, want := res.Metadata.DroppedToolCalls, 8*(70_000-loop.DefaultMaxToolCallsKept); got != want {
		t.Fatalf("dropped %d calls, want %d", got, want)
	}
	// One 70,000-call response is about 10 MB; 8 rounds of them kept would
	// be far over 100 MB.
	const budget = 48 << 20
	if grew := int64(m.peak) - int64(before.HeapAlloc); grew > budget {
		t.Fatalf("live heap grew by %d MiB during the run, want at most %d MiB", grew>>20, budget>>20)
	}
	t.Logf("live heap: %d MiB before, %d MiB at the largest model call", before.HeapAlloc>>20, m.peak>>20)
}

func TestTranscriptByteBound(t *testing.T) {
	big := strings.Repeat("y", 4000)
	m := looptest.ModelFunc(func(req loop.Request) (*loop.Response, error) {
		id := fmt.Sprintf("c%d", len(req.Messages))
		return &loop.Response{Message: loop.Message{Role: "assistant", ToolCalls: []loop.ToolCall{
			looptest.Call(id, "echo", `{"text":"`+big+`"}`),
		}}}, nil
	})
	cfg := fastConfig()
	cfg.MaxRounds = 100
	cfg.MaxTranscriptBytes = 20_000
	e := newEnv(t, cfg, m, nil, nil)
	res, err := e.run(t, "go")
	if !errors.Is(err, loop.ErrTranscriptTooLarge) || res.TerminationReason != loop.TerminationError {
		t.Fatalf("Run: %v, %v; want error ErrTranscriptTooLarge", res.TerminationReason, err)
	}
	if res.Metadata.Rounds >= 10 {
		t.Fatalf("%d rounds: the bound did not stop the run early", res.Metadata.Rounds)
	}
	if len(e.logs.lines(t, "transcript_too_large")) != 1 {
		t.Errorf("want one transcript_too_large line")
	}
}

func TestRunWallClockBudget(t *testing.T) {
	m := looptest.ModelFunc(func(req loop.Request) (*loop.Response, error) {
		if len(req.Messages) == 1 {
			return &loop.Response{Message: loop.Message{Role: "assistant", ToolCalls: []loop.ToolCall{
				looptest.Call("c1", "sleep", `{}`),
			}}}, nil
		}
		return &loop.Response{Message: loop.Message{Role: "assistant", Content: "late"}}, nil
	})
	cfg := fastConfig()
	cfg.MaxRunDuration = 300 * time.Millisecond
	cfg.ToolTimeout = time.Minute
	block := func(ctx context.Context, _ protocol.Call) (protocol.Result, bool) {
		<-ctx.Done()
		return protocol.Result{}, false
	}
	e := newEnv(t, cfg, m, block, nil)
	res, err := e.run(t, "go")
	if !errors.Is(err, loop.ErrRunBudget) || res.TerminationReason != loop.TerminationError {
		t.Fatalf("Run: %v, %v; want error ErrRunBudget", res.TerminationReason, err)
	}
	if res.Calls[0].Outcome != protocol.OutcomeCancelled {
		t.Fatalf("open call answered %q, want cancelled", res.Calls[0].Outcome)
	}
}

// --require-approval naming a tool the catalog does not list (a typo) is
// warned about the first time, not silently accepted; once per runner.
func TestRequireApprovalOfAMissingToolWarnsOnce(t *testing.T) {
	m := looptest.NewModel(looptest.Answer("one"), looptest.Answer("two"))
	cfg := fastConfig()
	cfg.RequireApproval = []string{"deplyo", "echo"}
	e := newEnv(t, cfg, m, nil, nil)
	for range 2 {
		if _, err := e.run(t, "go"); err != nil {
			t.Fatal(err)
		}
	}
	lines := e.logs.lines(t, "require_approval_tool_missing")
	if len(lines) != 1 || lines[0]["tool"] != "deplyo" {
		t.Fatalf("warnings %v, want one naming deplyo", lines)
	}
}
