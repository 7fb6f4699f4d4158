package loop_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/loop/looptest"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// usageTurn is a tool-calling turn that reports usage.
func usageTurn(in, out int, calls ...loop.ToolCall) looptest.Turn {
	t := looptest.Calls(calls...)
	t.Usage = loop.Usage{PromptTokens: in, CompletionTokens: out}
	return t
}

// TestBudgetCostStopsBeforeTheRequest: a run whose next request and its
// largest answer would cost more than its budget ends budget_exhausted
// before that request, with every call answered and the spend reported.
func TestBudgetCostStopsBeforeTheRequest(t *testing.T) {
	cfg := fastConfig()
	// $1/Mtok in, $10/Mtok out; answers of at most 1000 tokens.
	cfg.Budget = loop.Budget{CostUSD: 0.025, InputPrice: 1, OutputPrice: 10, MaxTokens: 1000}
	model := looptest.NewModel(
		usageTurn(2000, 1000, looptest.Call("c1", "echo", `{"text":"a"}`)), // 0.002 + 0.01 = 0.012
		usageTurn(2000, 1000, looptest.Call("c2", "echo", `{"text":"b"}`)), // 0.024: a third would pass 0.025
		looptest.Answer("never asked"),
	)
	e := newEnv(t, cfg, model, nil, nil)
	res, err := e.run(t, "go")
	if err != nil {
		t.Fatal(err)
	}
	if res.TerminationReason != loop.TerminationBudgetExhausted {
		t.Fatalf("termination %q, want budget_exhausted", res.TerminationReason)
	}
	if n := len(model.Requests()); n != 2 {
		t.Fatalf("%d model requests, want 2 (the third would pass the budget)", n)
	}
	b := res.Budget
	if b == nil || b.Exhausted != loop.BudgetCost || b.Limit != 0.025 || b.InputTokens != 4000 || b.OutputTokens != 2000 || b.ToolCalls != 2 {
		t.Fatalf("budget report %+v", b)
	}
	if b.CostUSD < 0.0239 || b.CostUSD > 0.0241 {
		t.Fatalf("cost %v, want 0.024", b.CostUSD)
	}
	if res.Metadata.Outcomes[protocol.OutcomeOK] != 2 {
		t.Fatalf("outcomes %v", res.Metadata.Outcomes)
	}
	out, _ := json.Marshal(res)
	if !strings.Contains(string(out), `"budget":{"exhausted":"cost_usd"`) {
		t.Fatalf("the result's JSON does not say which budget: %s", out)
	}
}

// TestBudgetFirstRequestTooLarge: a budget the first request cannot fit
// in ends the run before any model request.
func TestBudgetFirstRequestTooLarge(t *testing.T) {
	cfg := fastConfig()
	cfg.Budget = loop.Budget{InputTokens: 10}
	model := looptest.NewModel(looptest.Answer("never asked"))
	e := newEnv(t, cfg, model, nil, nil)
	res, err := e.run(t, strings.Repeat("a long prompt ", 20))
	if err != nil {
		t.Fatal(err)
	}
	if res.TerminationReason != loop.TerminationBudgetExhausted || res.Budget.Exhausted != loop.BudgetInputTokens || len(model.Requests()) != 0 {
		t.Fatalf("termination %q, budget %+v, %d requests", res.TerminationReason, res.Budget, len(model.Requests()))
	}
}

// TestBudgetOutputTokens: the output budget keeps room for one whole
// answer; a model that reports no usage is counted at its bound.
func TestBudgetOutputTokens(t *testing.T) {
	cfg := fastConfig()
	cfg.Budget = loop.Budget{OutputTokens: 250, MaxTokens: 100}
	model := looptest.NewModel(
		looptest.Calls(looptest.Call("c1", "echo", `{"text":"a"}`)), // no usage: counted 100
		looptest.Calls(looptest.Call("c2", "echo", `{"text":"b"}`)), // 200: a third would pass 250
		looptest.Answer("never asked"),
	)
	e := newEnv(t, cfg, model, nil, nil)
	res, _ := e.run(t, "go")
	if res.TerminationReason != loop.TerminationBudgetExhausted || res.Budget.Exhausted != loop.BudgetOutputTokens ||
		res.Budget.OutputTokens != 200 || len(model.Requests()) != 2 {
		t.Fatalf("termination %q, budget %+v, %d requests", res.TerminationReason, res.Budget, len(model.Requests()))
	}
}

// TestBudgetToolCalls: calls past the tool-call budget are answered
// rejected and never dispatched, and the run ends after their round.
func TestBudgetToolCalls(t *testing.T) {
	cfg := fastConfig()
	cfg.Budget = loop.Budget{ToolCalls: 3}
	model := looptest.NewModel(
		looptest.Calls(looptest.Call("c1", "echo", `{"text":"a"}`), looptest.Call("c2", "echo", `{"text":"b"}`)),
		looptest.Calls(looptest.Call("c3", "echo", `{"text":"c"}`), looptest.Call("c4", "echo", `{"text":"d"}`), looptest.Call("c5", "echo", `{"text":"e"}`)),
		looptest.Answer("never asked"),
	)
	e := newEnv(t, cfg, model, nil, nil)
	res, _ := e.run(t, "go")
	if res.TerminationReason != loop.TerminationBudgetExhausted || res.Budget.Exhausted != loop.BudgetToolCalls || res.Budget.ToolCalls != 3 {
		t.Fatalf("termination %q, budget %+v", res.TerminationReason, res.Budget)
	}
	if got := publishedTools(e.disp); len(got) != 3 {
		t.Fatalf("published %v, want 3 calls", got)
	}
	obs := toolMessages(res)
	if !strings.Contains(obs["c4"], "tool-call budget") || !strings.Contains(obs["c5"], "tool-call budget") {
		t.Fatalf("the calls past the budget are answered %q, %q", obs["c4"], obs["c5"])
	}
	if len(model.Requests()) != 2 {
		t.Fatalf("%d model requests, want 2", len(model.Requests()))
	}
}

// TestBudgetReportedWithoutExhaustion: a run with a budget that ends
// naturally reports what it spent.
func TestBudgetReportedWithoutExhaustion(t *testing.T) {
	cfg := fastConfig()
	cfg.Budget = loop.Budget{InputTokens: 1 << 20}
	turn := looptest.Answer("done")
	turn.Usage = loop.Usage{PromptTokens: 7, CompletionTokens: 3}
	e := newEnv(t, cfg, looptest.NewModel(turn), nil, nil)
	res, _ := e.run(t, "go")
	if res.TerminationReason != loop.TerminationNatural || res.Budget == nil || res.Budget.Exhausted != "" || res.Budget.InputTokens != 7 {
		t.Fatalf("termination %q, budget %+v", res.TerminationReason, res.Budget)
	}
}

// TestBudgetConfigRefusesNegative: a negative or NaN bound is a config
// error naming the field.
func TestBudgetConfigRefusesNegative(t *testing.T) {
	for _, b := range []loop.Budget{{InputTokens: -1}, {CostUSD: -1}, {InputPrice: -1}, {ToolCalls: -1}} {
		err := loop.Config{Budget: b}.Validate()
		var ce *loop.ConfigError
		if !errors.As(err, &ce) || !strings.HasPrefix(ce.Field, "Budget.") {
			t.Fatalf("%+v: %v", b, err)
		}
	}
}
