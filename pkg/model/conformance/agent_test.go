package conformance_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/model/anthropic"
	"github.com/toolfleet/toolfleet/pkg/model/anthropic/anthropictest"
	"github.com/toolfleet/toolfleet/pkg/model/openai"
	"github.com/toolfleet/toolfleet/pkg/model/openai/openaitest"
	"github.com/toolfleet/toolfleet/pkg/model/responses"
	"github.com/toolfleet/toolfleet/pkg/model/responses/responsestest"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// TestWindowBudgetAndTruncationEveryProvider: the history window (first
// messages and whole newest blocks), a budget and truncated_responses on
// every provider; the fakes refuse a request whose calls and results are
// separated, as the APIs do.
func TestWindowBudgetAndTruncationEveryProvider(t *testing.T) {
	ok := protocol.OutcomeOK
	tests := []struct {
		name  string
		setup setup
		turns []turn
		check func(t *testing.T, res *loop.Result, err error, f fake)
	}{
		{"window", setup{cfg: loop.Config{MaxHistoryMessages: 3}}, []turn{
			{calls: []loop.ToolCall{call("c1", "echo", `{"text":"a"}`), call("c2", "add", `{"a":2,"b":3}`), call("c3", "echo", `{"text":"b"}`)}},
			{calls: []loop.ToolCall{call("c4", "echo", `{"text":"c"}`)}},
			{calls: []loop.ToolCall{call("c5", "echo", `{"text":"d"}`)}},
			{content: "done"},
		}, func(t *testing.T, res *loop.Result, err error, f fake) {
			if err != nil || res.TerminationReason != loop.TerminationNatural || res.Answer != "done" {
				t.Fatalf("reason %s answer %q err %v", res.TerminationReason, res.Answer, err)
			}
			wantOutcomes(t, res, ok, ok, ok, ok, ok)
			if res.Metadata.MessagesTrimmed == 0 || len(res.Messages) != 1+4+2+2+1 {
				t.Fatalf("trimmed %d, stored %d messages", res.Metadata.MessagesTrimmed, len(res.Messages))
			}
		}},
		{"cost budget", setup{cfg: loop.Config{Budget: loop.Budget{CostUSD: 0.0005, InputPrice: 1, OutputPrice: 1, MaxTokens: 100}}}, []turn{
			{calls: []loop.ToolCall{call("c1", "echo", `{"text":"a"}`)}, usage: loop.Usage{PromptTokens: 300, CompletionTokens: 50}},
			{content: "never asked"},
		}, func(t *testing.T, res *loop.Result, err error, f fake) {
			if err != nil || res.TerminationReason != loop.TerminationBudgetExhausted || res.Budget.Exhausted != loop.BudgetCost {
				t.Fatalf("reason %s budget %+v err %v", res.TerminationReason, res.Budget, err)
			}
			if n := f.requests(); n != 1 {
				t.Fatalf("%d requests, want 1", n)
			}
			wantOutcomes(t, res, ok)
		}},
		{"truncated response", setup{}, []turn{{content: "cut sh", truncated: true}}, func(t *testing.T, res *loop.Result, err error, f fake) {
			if res.Metadata.TruncatedResponses != 1 {
				t.Fatalf("metadata %+v (err %v)", res.Metadata, err)
			}
		}},
	}
	for _, p := range providers {
		for _, tc := range tests {
			t.Run(p.name+"/"+tc.name, func(t *testing.T) {
				res, err, f := run(t, p, tc.setup, tc.turns...)
				tc.check(t, res, err, f)
			})
		}
	}
}

// TestSamplingParametersEveryProvider: temperature and max_tokens reach
// each provider's wire field.
func TestSamplingParametersEveryProvider(t *testing.T) {
	temp := 0.25
	req := loop.Request{Messages: []loop.Message{{Role: "user", Content: "hi"}}}
	cases := []struct {
		name, maxField string
		body           func(t *testing.T) []byte
	}{
		{"openai", "max_completion_tokens", func(t *testing.T) []byte {
			srv := openaitest.NewServer(t, openaitest.Sequence(openaitest.Reply{Content: "ok"}))
			m, err := openai.New(openai.Config{Model: "gpt-test", BaseURL: srv.URL, APIKey: "k", Temperature: &temp, MaxTokens: 77})
			complete(t, m, req, err)
			return srv.Requests()[0].Body
		}},
		{"anthropic", "max_tokens", func(t *testing.T) []byte {
			srv := anthropictest.NewServer(t, anthropictest.Sequence(anthropictest.Reply{Content: "ok"}))
			m, err := anthropic.New(anthropic.Config{Model: "claude-test", BaseURL: srv.URL, APIKey: "k", Temperature: &temp, MaxTokens: 77})
			complete(t, m, req, err)
			return srv.Requests()[0].Body
		}},
		{"openai-responses", "max_output_tokens", func(t *testing.T) []byte {
			srv := responsestest.NewServer(t, responsestest.Sequence(responsestest.Reply{Content: "ok"}))
			m, err := responses.New(responses.Config{Model: "gpt-test", BaseURL: srv.URL, APIKey: "k", Temperature: &temp, MaxOutputTokens: 77})
			complete(t, m, req, err)
			return srv.Requests()[0].Body
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var body map[string]any
			if err := json.Unmarshal(c.body(t), &body); err != nil {
				t.Fatal(err)
			}
			if body["temperature"] != 0.25 || body[c.maxField] != float64(77) {
				t.Fatalf("temperature %v, %s %v", body["temperature"], c.maxField, body[c.maxField])
			}
		})
	}
}

func complete(t *testing.T, m loop.Model, req loop.Request, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Complete(context.Background(), req); err != nil {
		t.Fatal(err)
	}
}
