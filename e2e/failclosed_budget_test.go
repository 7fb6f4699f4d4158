package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/model/openai/openaitest"
)

// TestFailClosedBudgetNonsenseUsage: a strict OpenAI model server reports
// prompt_tokens 2^62, then a negative completion_tokens, then a
// non-numeric one, each time with a tool call. Under an output budget of
// 2,500 tokens and max_tokens 1,000, "coordinator run --agent" counts the
// absurd and the invalid counts as the reserve: 10 + 1,000 + 1,000 output
// tokens, so the fourth request (2,010 + 1,000 > 2,500) is never made and
// the run ends budget_exhausted, reporting what it counted; the input
// tokens counted stay the run's estimate, far below the 100,000 budget,
// never 2^62 nor an overflowed sum.
func TestFailClosedBudgetNonsenseUsage(t *testing.T) {
	t.Parallel()
	echo := func(i int) []loop.ToolCall {
		return []loop.ToolCall{{ID: fmt.Sprintf("e%d", i), Type: "function",
			Function: loop.FunctionCall{Name: "echo", Arguments: fmt.Sprintf(`{"text":"call %d"}`, i)}}}
	}
	body := func(i int, usage string) string {
		return fmt.Sprintf(`{"id":"chatcmpl-%d","object":"chat.completion","created":1700000000,"model":"m",`+
			`"choices":[{"index":0,"message":{"role":"assistant","content":null,"refusal":null,"tool_calls":`+
			`[{"id":"e%d","type":"function","function":{"name":"echo","arguments":"{\"text\":\"call %d\"}"}}]},`+
			`"logprobs":null,"finish_reason":"tool_calls"}],"usage":%s}`, i, i, i, usage)
	}
	srv := openaitest.NewServer(t, openaitest.Sequence(
		openaitest.Reply{ToolCalls: echo(1), Usage: loop.Usage{PromptTokens: 1 << 62, CompletionTokens: 10}},
		openaitest.Reply{ToolCalls: echo(2), Usage: loop.Usage{PromptTokens: 50, CompletionTokens: -5}},
		openaitest.Reply{Body: body(3, `{"prompt_tokens":60,"completion_tokens":"many","total_tokens":60}`)},
		openaitest.Reply{Content: "a fourth request was made"},
	))
	dir := t.TempDir()
	agent := writeJSON(t, dir, "agent.json", map[string]any{
		"name":   "spender",
		"model":  map[string]any{"provider": "openai", "name": "m", "max_tokens": 1000},
		"tools":  []string{"echo"},
		"budget": map[string]any{"input_tokens": 100000, "output_tokens": 2500},
	})
	p := startProcEnv(t, "coordinator run", []string{"OPENAI_API_KEY=test-key", "OPENAI_BASE_URL=" + srv.URL},
		bins.coordinator, "run", "--agent", agent, "--output", "json", "--log-level", "info", "spend")
	res := p.result(120*time.Second, 1) // a run that did not end with an answer
	if n := len(srv.Requests()); n != 3 {
		t.Fatalf("the model was asked %d times, want 3 (the budget stops the fourth)", n)
	}
	if srv.Rejected() != 0 {
		t.Fatalf("the strict server refused %d requests", srv.Rejected())
	}
	if res.TerminationReason != loop.TerminationBudgetExhausted || res.Budget == nil || res.Budget.Exhausted != loop.BudgetOutputTokens {
		t.Fatalf("termination %s, budget %+v; want budget_exhausted on output_tokens", res.TerminationReason, res.Budget)
	}
	if res.Budget.OutputTokens != 2010 || res.Metadata.CompletionTokens != 2010 {
		t.Fatalf("output tokens counted: report %d, metadata %d; want 2010 (10 + the 1,000 reserve twice)", res.Budget.OutputTokens, res.Metadata.CompletionTokens)
	}
	if in := res.Budget.InputTokens; in <= 0 || in >= 100000 || int64(res.Metadata.PromptTokens) != in {
		t.Fatalf("input tokens counted: report %d, metadata %d; want the estimate and 50 and 60, under the budget", in, res.Metadata.PromptTokens)
	}
	recs, _ := answered(t, res)
	for _, id := range []string{"e1", "e2", "e3"} {
		if recs[id].Outcome != "ok" {
			t.Errorf("call %s: %s, want ok", id, recs[id].Outcome)
		}
	}
}
