package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/model/anthropic/anthropictest"
	"github.com/toolfleet/toolfleet/pkg/model/responses/responsestest"
)

var calcCall = []loop.ToolCall{{ID: "toolu_01", Type: "function",
	Function: loop.FunctionCall{Name: "calculator", Arguments: `{"expression":"2 + 3"}`}}}

type cliResult struct {
	Answer            string `json:"answer"`
	TerminationReason string `json:"termination_reason"`
	Metadata          struct {
		PromptTokens int `json:"prompt_tokens"`
	} `json:"metadata"`
	Calls []struct {
		Outcome string `json:"outcome"`
	} `json:"calls"`
}

func decodeCLIResult(t *testing.T, out string) cliResult {
	t.Helper()
	var res cliResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("output is not the JSON result: %v\n%s", err, out)
	}
	return res
}

// TestRunAnthropic drives "coordinator run --model anthropic:…" against the
// strict Messages fake: the calculator's tool_use is answered by a
// tool_result in the next user message, and the answer quotes it.
func TestRunAnthropic(t *testing.T) {
	srv := anthropictest.NewServer(t, func(n int, req *anthropictest.Request) anthropictest.Reply {
		if n == 0 {
			return anthropictest.Reply{ToolCalls: calcCall, Usage: loop.Usage{PromptTokens: 7}}
		}
		blocks, _ := req.Messages[len(req.Messages)-1].Blocks()
		return anthropictest.Reply{Content: "The sum is " + blocks[0].ResultText(), Usage: loop.Usage{PromptTokens: 9}}
	})
	srv.APIKey = "test-key"
	t.Setenv("ANTHROPIC_API_KEY", "test-key")
	code, out, stderr := runCLI(t, "run", "--model", "anthropic:claude-test", "--model-base-url", srv.URL, "--output", "json", "add 2 and 3")
	if code != exitOK {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr)
	}
	res := decodeCLIResult(t, out)
	if res.Answer != "The sum is 5" || res.Metadata.PromptTokens != 16 || len(res.Calls) != 1 || res.Calls[0].Outcome != "ok" {
		t.Fatalf("result %+v", res)
	}
	if rej := srv.Rejected(); len(rej) != 0 {
		t.Fatalf("the fake refused: %q", rej)
	}
}

// TestRunOpenAIResponses drives "coordinator run --model openai-responses:…"
// stateless and with --previous-response-id against the strict Responses
// fake.
func TestRunOpenAIResponses(t *testing.T) {
	for _, chained := range []bool{false, true} {
		t.Run(map[bool]string{false: "stateless", true: "chained"}[chained], func(t *testing.T) {
			srv := responsestest.NewServer(t, func(n int, req *responsestest.Request) responsestest.Reply {
				if n == 0 {
					return responsestest.Reply{ToolCalls: calcCall}
				}
				return responsestest.Reply{Content: "The sum is " + req.Input[len(req.Input)-1].Text()}
			})
			srv.APIKey = "test-key"
			t.Setenv("OPENAI_API_KEY", "test-key")
			args := []string{"run", "--model", "openai-responses:gpt-test", "--model-base-url", srv.URL, "--output", "json"}
			if chained {
				args = append(args, "--previous-response-id")
			}
			code, out, stderr := runCLI(t, append(args, "add 2 and 3")...)
			if code != exitOK {
				t.Fatalf("exit %d; stderr:\n%s", code, stderr)
			}
			if res := decodeCLIResult(t, out); res.Answer != "The sum is 5" {
				t.Fatalf("result %+v", res)
			}
			reqs := srv.Requests()
			if len(reqs) != 2 {
				t.Fatalf("%d requests", len(reqs))
			}
			if got := reqs[1].PreviousResponseID != ""; got != chained {
				t.Fatalf("second request previous_response_id %q, chained %v", reqs[1].PreviousResponseID, chained)
			}
			if chained && len(reqs[1].Input) != 1 {
				t.Fatalf("chained turn sent %d items, want the one function_call_output", len(reqs[1].Input))
			}
			if rej := srv.Rejected(); len(rej) != 0 {
				t.Fatalf("the fake refused: %q", rej)
			}
		})
	}
}

// TestRunProviderKeyStaysOut: a refused key, which the fakes quote in their
// error message as some servers do, never reaches stdout or stderr.
func TestRunProviderKeyStaysOut(t *testing.T) {
	const canary = "sk-canary-4f1d"
	a := anthropictest.NewServer(t, nil)
	a.APIKey = "other"
	r := responsestest.NewServer(t, nil)
	r.APIKey = "other"
	t.Setenv("ANTHROPIC_API_KEY", canary)
	t.Setenv("OPENAI_API_KEY", canary)
	for _, c := range [][2]string{{"anthropic:claude-test", a.URL}, {"openai-responses:gpt-test", r.URL}} {
		code, out, stderr := runCLI(t, "run", "--model", c[0], "--model-base-url", c[1], "--output", "json", "hi")
		if code != exitError {
			t.Fatalf("%s: exit %d, want %d; stderr:\n%s", c[0], code, exitError, stderr)
		}
		if strings.Contains(out+stderr, canary) || !strings.Contains(stderr, "HTTP 401") {
			t.Fatalf("%s: the key leaked or the status is missing:\n%s\n%s", c[0], out, stderr)
		}
	}
}

func TestRunPreviousResponseIDNeedsResponses(t *testing.T) {
	code, _, stderr := runCLI(t, "run", "--model", "anthropic:x", "--previous-response-id", "hi")
	if code != exitUsage || !strings.Contains(stderr, "--previous-response-id") {
		t.Fatalf("exit %d stderr %s", code, stderr)
	}
}
