package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/toolfleet/toolfleet/pkg/model/openai/openaitest"
)

// agentFile writes a definition and returns its path.
func agentFile(t *testing.T, doc string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "agent.json")
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestRunAgentFile: "run --agent FILE" runs the definition on an embedded
// fleet: its instructions, its scripted model and its tools only (the
// calculator the in-process worker serves is unknown_tool to it), its
// budget reported, the JSON result matching the schema.
func TestRunAgentFile(t *testing.T) {
	path := agentFile(t, `{"name":"echoer","instructions":"Echo things.",
		"model":{"provider":"scripted","script":{"turns":[
			{"content":"calling","tool_calls":[
				{"id":"c1","name":"calculator","arguments":{"expression":"1+1"}},
				{"id":"c2","name":"echo","arguments":{"text":"hi"}}]},
			{"content":"done"}]}},
		"tools":["echo"],"limits":{"max_rounds":4},"budget":{"tool_calls":5}}`)
	code, out, stderr := runCLI(t, "run", "--agent", path, "--output", "json", "echo hi")
	if code != exitOK {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr)
	}
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	if err := compileResultSchema(t).Validate(doc); err != nil {
		t.Fatalf("result does not match docs/result.schema.json: %v", err)
	}
	var res struct {
		Answer string `json:"answer"`
		Calls  []struct {
			CallID, Outcome string
		} `json:"calls"`
		Messages []struct{ Role, Content string } `json:"messages"`
		Budget   struct {
			ToolCalls int `json:"tool_calls"`
		} `json:"budget"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatal(err)
	}
	if res.Answer != "done" || len(res.Calls) != 2 || res.Calls[0].Outcome != "unknown_tool" || res.Calls[1].Outcome != "ok" {
		t.Fatalf("answer %q calls %+v", res.Answer, res.Calls)
	}
	if res.Messages[0].Role != "system" || res.Messages[0].Content != "Echo things." || res.Budget.ToolCalls != 2 {
		t.Fatalf("messages[0] %+v budget %+v", res.Messages[0], res.Budget)
	}
}

// TestRunAgentFileRefused: a definition that does not validate, or whose
// key variable is not set, is a usage error naming the field; --agent
// with --model is refused.
func TestRunAgentFileRefused(t *testing.T) {
	for doc, want := range map[string]string{
		`{"name":"x","model":{"provider":"openai","name":"gpt\nx"}}`:                                              "model.name",
		`{"name":"x","model":{"provider":"openai","name":"m","api_key_env":"NOPE_API_KEY"}}`:                      "model.api_key_env: the environment variable NOPE_API_KEY is not set",
		`{"name":"x","model":{"provider":"openai","name":"m"},"budget":{"prices":{"m":{"input":-1,"output":0}}}}`: "budget.prices.m.input",
	} {
		code, _, stderr := runCLI(t, "run", "--agent", agentFile(t, doc), "hi")
		if code != exitUsage || !strings.Contains(stderr, want) {
			t.Errorf("exit %d, stderr %q; want 2 and %q", code, stderr, want)
		}
	}
	code, _, stderr := runCLI(t, "run", "--agent", agentFile(t, `{"name":"x","model":{"provider":"scripted","script":{"turns":[]}}}`), "--model", "openai:m", "hi")
	if code != exitUsage || !strings.Contains(stderr, "--agent FILE takes its model") {
		t.Fatalf("exit %d: %s", code, stderr)
	}
}

// TestRunTemperatureMaxTokens: --temperature and --max-tokens reach the
// model's requests, and are refused for the scripted model.
func TestRunTemperatureMaxTokensRefusedForScripted(t *testing.T) {
	code, _, stderr := runCLI(t, "run", "--temperature", "0.3")
	if code != exitUsage || !strings.Contains(stderr, "--temperature and --max-tokens need") {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	code, _, stderr = runCLI(t, "run", "--temperature", "warm", "hi")
	if code != exitUsage {
		t.Fatalf("exit %d: %s", code, stderr)
	}
}

// TestRunTemperatureMaxTokens: --temperature and --max-tokens reach the
// model's requests.
func TestRunTemperatureMaxTokens(t *testing.T) {
	srv := openaitest.NewServer(t, openaitest.Sequence(openaitest.Reply{Content: "fine"}))
	t.Setenv("OPENAI_API_KEY", "test-key")
	code, _, stderr := runCLI(t, "run", "--model", "openai:test-model", "--model-base-url", srv.URL, "--temperature", "0.3", "--max-tokens", "99", "hi")
	if code != exitOK {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr)
	}
	var body map[string]any
	if err := json.Unmarshal(srv.Requests()[0].Body, &body); err != nil {
		t.Fatal(err)
	}
	if body["temperature"] != 0.3 || body["max_completion_tokens"] != float64(99) {
		t.Fatalf("temperature %v max_completion_tokens %v", body["temperature"], body["max_completion_tokens"])
	}
}
