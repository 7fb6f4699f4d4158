package loop_test

import (
	"strings"
	"testing"

	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/loop/looptest"
)

func echoRound(id string) looptest.Turn {
	return looptest.Calls(looptest.Call(id, "echo", `{"text":"`+id+`"}`))
}

// TestWindowKeepsHeadAndNewestBlocks: each request holds at most
// MaxHistoryMessages messages, opens with the system and user messages,
// and never separates a call from its answer (the fake model refuses such
// a transcript); the stored transcript keeps everything.
func TestWindowKeepsHeadAndNewestBlocks(t *testing.T) {
	cfg := fastConfig()
	cfg.MaxHistoryMessages = 5
	model := looptest.NewModel(echoRound("c1"), echoRound("c2"), echoRound("c3"), echoRound("c4"), looptest.Answer("done"))
	e := newEnv(t, cfg, model, nil, nil)
	res, err := e.runner.RunMessages(t.Context(), []loop.Message{{Role: "system", Content: "be brief"}, {Role: "user", Content: "go"}})
	if err != nil {
		t.Fatal(err)
	}
	checkInvariants(t, res)
	for i, r := range model.Requests() {
		if len(r.Messages) > 5 {
			t.Fatalf("request %d holds %d messages", i, len(r.Messages))
		}
		if r.Messages[0].Content != "be brief" || r.Messages[1].Content != "go" {
			t.Fatalf("request %d does not open with the head: %+v", i, r.Messages[:2])
		}
	}
	last := model.Requests()[4].Messages
	if len(last) != 4 || last[2].ToolCalls[0].ID != "c4" {
		t.Fatalf("the last window: %+v", last)
	}
	if len(res.Messages) != 2+4*2+1 || res.Metadata.MessagesTrimmed == 0 {
		t.Fatalf("stored %d messages, trimmed %d", len(res.Messages), res.Metadata.MessagesTrimmed)
	}
}

// TestWindowNeverSplitsABlock: a round whose calls alone are over the
// bound is sent whole.
func TestWindowNeverSplitsABlock(t *testing.T) {
	cfg := fastConfig()
	cfg.MaxHistoryMessages = 3
	model := looptest.NewModel(
		echoRound("c0"),
		looptest.Calls(looptest.Call("a", "echo", `{"text":"a"}`), looptest.Call("b", "echo", `{"text":"b"}`), looptest.Call("c", "echo", `{"text":"c"}`)),
		looptest.Answer("done"),
	)
	e := newEnv(t, cfg, model, nil, nil)
	res, err := e.run(t, "go")
	if err != nil || res.TerminationReason != loop.TerminationNatural {
		t.Fatalf("%v %v", res.TerminationReason, err)
	}
	last := model.Requests()[2].Messages
	if len(last) != 5 || last[0].Content != "go" || len(last[1].ToolCalls) != 3 {
		t.Fatalf("the last window: %+v", last)
	}
}

// TestWindowSummarizer: what a window leaves out is summarized into a
// system message after the head, once per window; the summarizer's
// tokens count against the budget.
func TestWindowSummarizer(t *testing.T) {
	cfg := fastConfig()
	cfg.MaxHistoryMessages = 4
	sum := looptest.ModelFunc(func(r loop.Request) (*loop.Response, error) {
		return &loop.Response{Message: loop.Message{Role: "assistant", Content: "earlier: echoed"}, Usage: loop.Usage{PromptTokens: 50, CompletionTokens: 5}}, nil
	})
	cfg.Summarizer = sum
	cfg.Budget = loop.Budget{InputTokens: 1 << 20}
	model := looptest.NewModel(echoRound("c1"), echoRound("c2"), echoRound("c3"), looptest.Answer("done"))
	e := newEnv(t, cfg, model, nil, nil)
	res, err := e.run(t, "go")
	if err != nil {
		t.Fatal(err)
	}
	last := model.Requests()[3].Messages
	if len(last) != 4 || last[1].Role != "system" || last[1].Content != loop.SummaryPrefix+"earlier: echoed" {
		t.Fatalf("the last window: %+v", last)
	}
	n := len(sum.Requests())
	if n == 0 || res.Metadata.Summarized != n || res.Metadata.SummarizerTokens != 55*n {
		t.Fatalf("%d summaries, metadata %+v", n, res.Metadata)
	}
	if res.Budget.InputTokens < int64(50*n) {
		t.Fatalf("the summarizer's tokens are not in the budget: %+v", res.Budget)
	}
	if !strings.Contains(sum.Requests()[0].Messages[1].Content, "assistant [calls echo]") || !strings.Contains(sum.Requests()[0].Messages[1].Content, "tool: c1") {
		t.Fatalf("the summarizer was sent %q", sum.Requests()[0].Messages[1].Content)
	}
}

// TestTruncatedResponses counts answers cut at finish_reason length.
func TestTruncatedResponses(t *testing.T) {
	turn := looptest.Answer("cut sh")
	turn.FinishReason = "length"
	e := newEnv(t, fastConfig(), looptest.NewModel(turn), nil, nil)
	res, _ := e.run(t, "go")
	if res.Metadata.TruncatedResponses != 1 {
		t.Fatalf("metadata %+v", res.Metadata)
	}
}
