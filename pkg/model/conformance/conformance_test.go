package conformance_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/loop/looptest"
	"github.com/toolfleet/toolfleet/pkg/model/anthropic"
	"github.com/toolfleet/toolfleet/pkg/model/anthropic/anthropictest"
	"github.com/toolfleet/toolfleet/pkg/model/openai"
	"github.com/toolfleet/toolfleet/pkg/model/openai/openaitest"
	"github.com/toolfleet/toolfleet/pkg/model/responses"
	"github.com/toolfleet/toolfleet/pkg/model/responses/responsestest"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// turn is one scripted model answer in neutral terms; each provider turns it
// into its own wire reply.
type turn struct {
	content string
	calls   []loop.ToolCall
	// status, with header, answers an HTTP error instead (429, 529, 503).
	status int
	header http.Header
	// truncated ends the answer at the output limit (max_tokens,
	// incomplete) with its calls possibly cut off.
	truncated bool
	usage     loop.Usage
}

// fake is one provider's model and the strict fake behind it.
type fake struct {
	model    loop.Model
	rejected func() []string
	requests func() int
}

type provider struct {
	name string
	new  func(t *testing.T, turns []turn) fake
	// genAI is what the model's spans name: gen_ai.provider.name and
	// gen_ai.request.model.
	genAI [2]string
}

var providers = []provider{
	{"openai", newOpenAI, [2]string{"openai", "gpt-test"}},
	{"anthropic", newAnthropic, [2]string{"anthropic", "claude-test"}},
	{"openai-responses", func(t *testing.T, turns []turn) fake { return newResponses(t, turns, false) }, [2]string{"openai", "gpt-test"}},
	{"openai-responses-chained", func(t *testing.T, turns []turn) fake { return newResponses(t, turns, true) }, [2]string{"openai", "gpt-test"}},
}

const fastRetries = 5 * time.Millisecond

func newOpenAI(t *testing.T, turns []turn) fake {
	replies := make([]openaitest.Reply, len(turns))
	for i, tu := range turns {
		replies[i] = openaitest.Reply{Content: tu.content, ToolCalls: tu.calls, Status: tu.status, Header: tu.header, Usage: tu.usage}
		if tu.truncated {
			replies[i].FinishReason = "length"
		}
	}
	srv := openaitest.NewServer(t, openaitest.Sequence(replies...))
	m, err := openai.New(openai.Config{Model: "gpt-test", BaseURL: srv.URL, APIKey: "k", RetryBaseDelay: fastRetries, MaxRetryDelay: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return fake{model: m, requests: func() int { return len(srv.Requests()) }, rejected: func() []string {
		if n := srv.Rejected(); n > 0 {
			return []string{"openai fake rejected requests"}
		}
		return nil
	}}
}

func newAnthropic(t *testing.T, turns []turn) fake {
	replies := make([]anthropictest.Reply, len(turns))
	for i, tu := range turns {
		replies[i] = anthropictest.Reply{Content: tu.content, ToolCalls: tu.calls, Status: tu.status, Header: tu.header, Usage: tu.usage}
		if tu.truncated {
			replies[i].StopReason = "max_tokens"
		}
	}
	srv := anthropictest.NewServer(t, anthropictest.Sequence(replies...))
	srv.APIKey = "k"
	m, err := anthropic.New(anthropic.Config{Model: "claude-test", BaseURL: srv.URL, APIKey: "k", RetryBaseDelay: fastRetries, MaxRetryDelay: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return fake{model: m, rejected: srv.Rejected, requests: func() int { return len(srv.Requests()) }}
}

func newResponses(t *testing.T, turns []turn, chained bool) fake {
	replies := make([]responsestest.Reply, len(turns))
	for i, tu := range turns {
		replies[i] = responsestest.Reply{Content: tu.content, ToolCalls: tu.calls, Status: tu.status, Header: tu.header, Usage: tu.usage}
		if tu.truncated {
			replies[i].ResponseStatus, replies[i].IncompleteReason = "incomplete", "max_output_tokens"
		}
	}
	srv := responsestest.NewServer(t, responsestest.Sequence(replies...))
	srv.APIKey = "k"
	m, err := responses.New(responses.Config{Model: "gpt-test", BaseURL: srv.URL, APIKey: "k", PreviousResponseID: chained,
		RetryBaseDelay: fastRetries, MaxRetryDelay: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return fake{model: m, rejected: srv.Rejected, requests: func() int { return len(srv.Requests()) }}
}

const (
	echoSchema = `{"type":"object","properties":{"text":{"type":"string"}},"required":["text"],"additionalProperties":false}`
	addSchema  = `{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"}},"required":["a","b"],"additionalProperties":false}`
	openSchema = `{"type":"object"}`
)

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
	case "hang":
		return protocol.Result{}, false
	case "fail":
		return looptest.Failed("*errors.errorString"), true
	}
	return protocol.Result{Outcome: protocol.OutcomeUnknownTool}, true
}

type setup struct {
	cfg      loop.Config
	gate     loop.Gate
	progress bool
	// drop names the tools that leave the catalog once a call has run
	// ("*": all of them): a catalog that changes under a running run.
	drop []string
}

// catalog is a catalog that tools can leave while a run uses it.
type catalog struct {
	mu    sync.Mutex
	specs []protocol.ToolSpec
}

func (c *catalog) Tools(context.Context) ([]protocol.ToolSpec, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.specs), nil
}

func (c *catalog) remove(names []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.specs = slices.DeleteFunc(c.specs, func(s protocol.ToolSpec) bool {
		return slices.Contains(names, "*") || slices.Contains(names, string(s.Name))
	})
}

// run runs turns through p and checks what every run must keep: a result,
// a transcript the loop and the provider's fake accept, every id answered.
func run(t *testing.T, p provider, s setup, turns ...turn) (*loop.Result, error, fake) {
	t.Helper()
	f := p.new(t, turns)
	cat := &catalog{specs: []protocol.ToolSpec{looptest.MustSpec("echo", echoSchema), looptest.MustSpec("add", addSchema),
		looptest.MustSpec("hang", openSchema), looptest.MustSpec("fail", openSchema)}}
	d := looptest.New(func(ctx context.Context, c protocol.Call) (protocol.Result, bool) {
		r, ok := handler(ctx, c)
		if len(s.drop) > 0 {
			cat.remove(s.drop) // before the call is answered, so before the next round
		}
		return r, ok
	})
	d.Started = s.progress
	cfg := s.cfg
	if cfg.Grace == 0 {
		cfg.Grace = 20 * time.Millisecond
	}
	cfg.CancelTimeout = time.Second
	cfg.Logger = zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel)
	r, err := loop.New(cfg, f.model, cat, d, s.gate)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Wait)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	res, runErr := r.Run(ctx, "go")
	if res == nil {
		t.Fatalf("nil result (err %v)", runErr)
	}
	if err := looptest.CheckTranscript(res.Messages); err != nil {
		t.Fatalf("transcript: %v", err)
	}
	if rej := f.rejected(); len(rej) > 0 {
		t.Fatalf("the fake refused %d request(s): %q", len(rej), rej)
	}
	return res, runErr, f
}

func outcomes(res *loop.Result) []protocol.Outcome {
	var out []protocol.Outcome
	for _, c := range res.Calls {
		out = append(out, c.Outcome)
	}
	return out
}

func wantOutcomes(t *testing.T, res *loop.Result, want ...protocol.Outcome) {
	t.Helper()
	got := outcomes(res)
	if len(got) != len(want) {
		t.Fatalf("outcomes %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("outcomes %v, want %v", got, want)
		}
	}
}

func call(id, tool, args string) loop.ToolCall { return looptest.Call(id, tool, args) }

func TestGuarantees(t *testing.T) {
	ok, inv := protocol.OutcomeOK, protocol.OutcomeInvalidArguments
	tests := []struct {
		name  string
		setup setup
		turns []turn
		check func(t *testing.T, res *loop.Result, err error)
	}{
		{"parallel calls", setup{}, []turn{
			{calls: []loop.ToolCall{call("c1", "echo", `{"text":"a"}`), call("c2", "add", `{"a":2,"b":3}`), call("c3", "echo", `{"text":"b"}`)}, usage: loop.Usage{PromptTokens: 10, CompletionTokens: 5}},
			{content: "done", usage: loop.Usage{PromptTokens: 20, CompletionTokens: 2}},
		}, func(t *testing.T, res *loop.Result, err error) {
			if err != nil || res.TerminationReason != loop.TerminationNatural || res.Answer != "done" {
				t.Fatalf("reason %s answer %q err %v", res.TerminationReason, res.Answer, err)
			}
			wantOutcomes(t, res, ok, ok, ok)
			if res.Metadata.PromptTokens != 30 || res.Metadata.CompletionTokens != 7 {
				t.Fatalf("tokens %d/%d, want 30/7", res.Metadata.PromptTokens, res.Metadata.CompletionTokens)
			}
		}},
		{"the cap", setup{cfg: loop.Config{MaxToolCallsPerRound: 2}}, []turn{
			{calls: []loop.ToolCall{call("c1", "echo", `{"text":"a"}`), call("c2", "echo", `{"text":"b"}`), call("c3", "echo", `{"text":"c"}`), call("c4", "echo", `{"text":"d"}`)}},
			{content: "done"},
		}, func(t *testing.T, res *loop.Result, err error) {
			wantOutcomes(t, res, ok, ok, protocol.OutcomeRejected, protocol.OutcomeRejected)
		}},
		{"invalid arguments", setup{}, []turn{
			{calls: []loop.ToolCall{call("c1", "add", `{"a":"x","b":1}`), call("c2", "add", `{"a":1}`), call("c3", "echo", `{"text":"fine"}`)}},
			{content: "done"},
		}, func(t *testing.T, res *loop.Result, err error) {
			wantOutcomes(t, res, inv, inv, ok)
		}},
		{"unknown tool and repeated ids", setup{}, []turn{
			{calls: []loop.ToolCall{call("c1", "no_such_tool", `{}`), call("c2", "echo", `{"text":"a"}`), call("c2", "echo", `{"text":"b"}`)}},
			{calls: []loop.ToolCall{call("c1", "echo", `{"text":"again"}`)}},
			{content: "done"},
		}, func(t *testing.T, res *loop.Result, err error) {
			wantOutcomes(t, res, protocol.OutcomeUnknownTool, ok, protocol.OutcomeRejected, ok)
		}},
		{"hostile ids and names", setup{}, []turn{
			{calls: []loop.ToolCall{call("c 1", "bad.name", `{}`), call("c.2", "echo", `{"text":"a"}`), call("", "echo", `{"text":"b"}`)}},
			{content: "done"},
		}, func(t *testing.T, res *loop.Result, err error) {
			if err != nil || res.TerminationReason != loop.TerminationNatural {
				t.Fatalf("reason %s err %v", res.TerminationReason, err)
			}
			wantOutcomes(t, res, protocol.OutcomeUnknownTool, ok, ok)
		}},
		{"a denied approval", setup{cfg: loop.Config{RequireApproval: []string{"echo"}}, gate: looptest.DenyAll("no")}, []turn{
			{calls: []loop.ToolCall{call("c1", "echo", `{"text":"a"}`), call("c2", "add", `{"a":1,"b":1}`)}},
			{content: "done"},
		}, func(t *testing.T, res *loop.Result, err error) {
			wantOutcomes(t, res, protocol.OutcomeDenied, ok)
		}},
		{"a timeout and a failure", setup{cfg: loop.Config{ToolTimeout: 50 * time.Millisecond}}, []turn{
			{calls: []loop.ToolCall{call("c1", "hang", `{}`), call("c2", "fail", `{}`)}},
			{content: "done"},
		}, func(t *testing.T, res *loop.Result, err error) {
			wantOutcomes(t, res, protocol.OutcomeTimeout, protocol.OutcomeFailed)
		}},
		{"a worker crash", setup{cfg: loop.Config{ToolTimeout: 50 * time.Millisecond}, progress: true}, []turn{
			{calls: []loop.ToolCall{call("c1", "hang", `{}`)}},
			{content: "done"},
		}, func(t *testing.T, res *loop.Result, err error) {
			wantOutcomes(t, res, protocol.OutcomeUnknown)
			if obs := res.Messages[len(res.Messages)-2].Content; !strings.Contains(obs, "may or may not have taken effect") {
				t.Fatalf("observation %q", obs)
			}
		}},
		{"429 and 503 with Retry-After", setup{}, []turn{
			{status: 429, header: http.Header{"Retry-After": {"0"}}},
			{status: 503, header: http.Header{"Retry-After-Ms": {"1"}}},
			{calls: []loop.ToolCall{call("c1", "echo", `{"text":"a"}`)}},
			{content: "done"},
		}, func(t *testing.T, res *loop.Result, err error) {
			if err != nil || res.TerminationReason != loop.TerminationNatural {
				t.Fatalf("reason %s err %v", res.TerminationReason, err)
			}
			wantOutcomes(t, res, ok)
		}},
		{"the catalog empties mid-run", setup{drop: []string{"*"}}, []turn{
			{calls: []loop.ToolCall{call("c1", "echo", `{"text":"a"}`), call("c2", "add", `{"a":1,"b":2}`)}},
			{calls: []loop.ToolCall{call("c3", "echo", `{"text":"again"}`)}},
			{content: "done"},
		}, func(t *testing.T, res *loop.Result, err error) {
			if err != nil || res.TerminationReason != loop.TerminationNatural || res.Answer != "done" {
				t.Fatalf("reason %s answer %q err %v", res.TerminationReason, res.Answer, err)
			}
			wantOutcomes(t, res, ok, ok, protocol.OutcomeUnknownTool)
		}},
		{"the tool the transcript used leaves the catalog", setup{drop: []string{"echo"}}, []turn{
			{calls: []loop.ToolCall{call("c1", "echo", `{"text":"a"}`)}},
			{calls: []loop.ToolCall{call("c2", "echo", `{"text":"b"}`), call("c3", "add", `{"a":1,"b":2}`)}},
			{content: "done"},
		}, func(t *testing.T, res *loop.Result, err error) {
			if err != nil || res.TerminationReason != loop.TerminationNatural {
				t.Fatalf("reason %s err %v", res.TerminationReason, err)
			}
			wantOutcomes(t, res, ok, protocol.OutcomeUnknownTool, ok)
		}},
		{"huge arguments", setup{}, []turn{
			{calls: []loop.ToolCall{call("c1", "echo", `{"text":"`+strings.Repeat("x", loop.MaxArgumentsBytes+10)+`"}`)}},
			{content: "done"},
		}, func(t *testing.T, res *loop.Result, err error) {
			wantOutcomes(t, res, inv)
		}},
	}
	for _, tt := range tests {
		for _, p := range providers {
			t.Run(tt.name+"/"+p.name, func(t *testing.T) {
				res, err, _ := run(t, p, tt.setup, tt.turns...)
				tt.check(t, res, err)
			})
		}
	}
}

// A tool call cut off by the output limit is a model error the run
// reports, never a silent stop, and leaves no id unanswered.
func TestTruncatedToolCallIsAnError(t *testing.T) {
	for _, p := range providers {
		if p.name == "openai" {
			continue // chat completions: finish_reason "length" keeps the calls (package openai)
		}
		t.Run(p.name, func(t *testing.T) {
			res, err, _ := run(t, p, setup{},
				turn{calls: []loop.ToolCall{call("c1", "echo", `{"text":"a"}`)}},
				turn{calls: []loop.ToolCall{call("c2", "echo", `{"text":"b`)}, truncated: true},
			)
			if err == nil || res.TerminationReason != loop.TerminationError {
				t.Fatalf("reason %s err %v, want error", res.TerminationReason, err)
			}
			wantOutcomes(t, res, protocol.OutcomeOK)
		})
	}
}

// An answer truncated without a tool call ends the run naturally.
func TestTruncatedAnswer(t *testing.T) {
	for _, p := range providers {
		t.Run(p.name, func(t *testing.T) {
			res, err, _ := run(t, p, setup{}, turn{content: "partial", truncated: true})
			if err != nil || res.TerminationReason != loop.TerminationNatural || res.Answer != "partial" {
				t.Fatalf("reason %s answer %q err %v", res.TerminationReason, res.Answer, err)
			}
		})
	}
}

// Every provider names itself and its model on the model call's span
// (gen_ai.provider.name, gen_ai.request.model), as the GenAI conventions ask.
func TestModelSpansNameProviderAndModel(t *testing.T) {
	for _, p := range providers {
		t.Run(p.name, func(t *testing.T) {
			exp := tracetest.NewInMemoryExporter()
			s := setup{}
			s.cfg.TracerProvider = sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
			run(t, p, s, turn{calls: []loop.ToolCall{call("c1", "echo", `{"text":"a"}`)}}, turn{content: "done"})
			chats := 0
			for _, sp := range exp.GetSpans() {
				if !strings.HasPrefix(sp.Name, "chat") {
					continue
				}
				chats++
				got := map[string]string{}
				for _, a := range sp.Attributes {
					got[string(a.Key)] = a.Value.Emit()
				}
				if sp.Name != "chat "+p.genAI[1] || got["gen_ai.provider.name"] != p.genAI[0] || got["gen_ai.request.model"] != p.genAI[1] {
					t.Errorf("span %q: provider %q model %q, want %q %q", sp.Name, got["gen_ai.provider.name"], got["gen_ai.request.model"], p.genAI[0], p.genAI[1])
				}
			}
			if chats != 2 {
				t.Fatalf("%d model call spans, want 2", chats)
			}
		})
	}
}
