package demo_test

import (
	"context"
	"strings"
	"testing"

	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/loop/looptest"
	"github.com/toolfleet/toolfleet/pkg/model/demo"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// fleet is an in-memory fleet whose workers run the real harness with the
// built-in tools, and a model that checks each transcript it is sent.
type fleet struct {
	h     *harness.Harness
	d     *looptest.Batcher
	model *checked
}

func newFleet(t *testing.T, tools ...harness.Tool) *fleet {
	t.Helper()
	if tools == nil {
		tools = []harness.Tool{harness.Calculator(), harness.Echo()}
	}
	h, err := harness.New(harness.Config{}, tools...)
	if err != nil {
		t.Fatal(err)
	}
	d := looptest.NewBatcher(func(ctx context.Context, c protocol.Call) (protocol.Result, bool) {
		r := h.Execute(ctx, harness.Call{Tool: c.Tool, Arguments: c.Arguments, Deadline: c.Deadline})
		return protocol.Result{Outcome: r.Outcome, Output: r.Output, ErrorType: r.ErrorType}, true
	})
	return &fleet{h: h, d: d, model: &checked{t: t}}
}

func (f *fleet) run(t *testing.T, prompt string) *loop.Result {
	t.Helper()
	r, err := loop.New(loop.Config{}, f.model, looptest.NewCatalog(f.h.Specs()...), f.d, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Run(t.Context(), prompt)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// checked is the demo model behind the transcript rule the real APIs
// enforce.
type checked struct {
	t *testing.T
	m demo.Model
}

func (c *checked) Complete(ctx context.Context, req loop.Request) (*loop.Response, error) {
	if err := looptest.CheckTranscript(req.Messages); err != nil {
		c.t.Errorf("transcript refused: %v", err)
	}
	return c.m.Complete(ctx, req)
}

func TestAnswersThePrompt(t *testing.T) {
	for _, tc := range []struct {
		prompt, answer string
		rounds         int
		batches        []int
	}{
		{"What is 7 times 6?", "7 * 6 = 42.", 2, []int{1}},
		{"What is 7 times 6? And 2 to the power of 10?", "7 * 6 = 42 and 2 ** 10 = 1024.", 2, []int{2}},
		{"What is (17 + 25) * 3, what is 2 ** 10, and what is their sum?", "(17 + 25) * 3 = 126, 2 ** 10 = 1024, and their sum is 1150.", 3, []int{2, 1}},
		{"Multiply three and four: their product?", "3 * 4 = 12.", 2, []int{1}},
		{"5 squared, 2 cubed and 10 mod 4: the sum of them? the total!", "5 ** 2 = 25, 2 ** 3 = 8, 10 % 4 = 2, and their sum is 35.", 3, []int{3, 1}},
	} {
		t.Run(tc.prompt, func(t *testing.T) {
			f := newFleet(t)
			res := f.run(t, tc.prompt)
			if res.TerminationReason != loop.TerminationNatural || res.Answer != tc.answer {
				t.Errorf("%s %q, want natural %q", res.TerminationReason, res.Answer, tc.answer)
			}
			if res.Metadata.Rounds != tc.rounds {
				t.Errorf("rounds=%d, want %d", res.Metadata.Rounds, tc.rounds)
			}
			var sizes []int // the calls of each round, asked together
			for _, m := range res.Messages {
				if len(m.ToolCalls) > 0 {
					sizes = append(sizes, len(m.ToolCalls))
				}
			}
			if len(sizes) != len(tc.batches) {
				t.Fatalf("batches of %v, want %v", sizes, tc.batches)
			}
			for i := range sizes {
				if sizes[i] != tc.batches[i] {
					t.Errorf("batches of %v, want %v", sizes, tc.batches)
				}
			}
		})
	}
}

func TestUnreadablePromptGetsHelp(t *testing.T) {
	f := newFleet(t)
	for _, p := range []string{"Write me a poem about NATS.", "?", "I have 3 apples"} {
		res := f.run(t, p)
		if res.TerminationReason != loop.TerminationNatural || res.Answer != demo.Help || res.Metadata.ToolCallsMade != 0 {
			t.Errorf("%q: %s %q with %d calls, want natural demo.Help", p, res.TerminationReason, res.Answer, res.Metadata.ToolCallsMade)
		}
	}
	for _, want := range []string{"demo model", "not a language model", "--model openai:", "anthropic:"} {
		if !strings.Contains(demo.Help, want) {
			t.Errorf("Help does not say %q", want)
		}
	}
}

func TestWithoutCalculator(t *testing.T) {
	f := newFleet(t, harness.Echo())
	res := f.run(t, "What is 7 times 6?")
	if res.TerminationReason != loop.TerminationNatural || !strings.Contains(res.Answer, "--builtin calculator") || res.Metadata.ToolCallsMade != 0 {
		t.Errorf("%s %q", res.TerminationReason, res.Answer)
	}
}

func TestHostilePrompts(t *testing.T) {
	f := newFleet(t)
	for name, tc := range map[string]struct {
		prompt string
		want   string
	}{
		"10 MB":            {strings.Repeat("7 times 6 ", 1<<20), "at most 65536 bytes"},
		"control":          {"\x1b]52;c;aGk=\x07 What is \x1b[2J 7 * 6\u202e?", "7 * 6 = 42"},
		"nested":           {strings.Repeat("(", 10000) + "1" + strings.Repeat(")", 10000), ""},
		"huge power":       {"1e308 ** 1e308", "could not be evaluated"},
		"division by zero": {"What is 1 / 0 and 1 % 0?", "1 / 0 could not be evaluated: \"Tool 'calculator' failed: *harness.EvaluationError\""},
		"sum of a failure": {"What is 1 / 0 and 2 + 2, and their sum?", "2 + 2 = 4"},
		"many":             {strings.Repeat("1+1, ", 100), "84 more"},
		"long number":      {strings.Repeat("9", 5000) + " + 1", ""},
	} {
		t.Run(name, func(t *testing.T) {
			res := f.run(t, tc.prompt)
			if res.TerminationReason != loop.TerminationNatural || res.Answer == "" || !strings.Contains(res.Answer, tc.want) {
				t.Errorf("%s %.300q, want natural with %q", res.TerminationReason, res.Answer, tc.want)
			}
		})
	}
}

func TestConcurrentRunsAndTurns(t *testing.T) {
	m := demo.New()
	// A second user turn in the same transcript starts over, with ids of
	// its own.
	msgs := []loop.Message{{Role: "user", Content: "2 + 2"}}
	tools := []loop.ToolDef{{Name: demo.Tool}}
	resp, err := m.Complete(t.Context(), loop.Request{Messages: msgs, Tools: tools})
	if err != nil || len(resp.Message.ToolCalls) != 1 {
		t.Fatalf("%v %+v", err, resp)
	}
	msgs = append(msgs, resp.Message, loop.Message{Role: "tool", ToolCallID: resp.Message.ToolCalls[0].ID, Content: "4"})
	resp, _ = m.Complete(t.Context(), loop.Request{Messages: msgs, Tools: tools})
	msgs = append(msgs, resp.Message, loop.Message{Role: "user", Content: "3 * 3"})
	resp2, _ := m.Complete(t.Context(), loop.Request{Messages: msgs, Tools: tools})
	if len(resp2.Message.ToolCalls) != 1 || resp2.Message.ToolCalls[0].ID == msgs[1].ToolCalls[0].ID {
		t.Errorf("second turn calls %+v", resp2.Message.ToolCalls)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := m.Complete(ctx, loop.Request{Messages: msgs}); err == nil {
		t.Error("a cancelled context answers")
	}
}
