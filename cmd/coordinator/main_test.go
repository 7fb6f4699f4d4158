package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/toolfleet/toolfleet/internal/testsync"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/model/openai/openaitest"
)

// runCLI runs the coordinator command in process with a clean NATS
// environment, so no flags means the embedded server.
func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	t.Setenv("NATS_URL", "")
	t.Setenv("TMPDIR", t.TempDir())
	// The command's logger and its own messages share stderr from several
	// goroutines, as they share the process's stderr.
	var out, errb testsync.Buffer
	code = run(args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestRunDemoWithNoFlags(t *testing.T) {
	code, out, stderr := runCLI(t, "run")
	if code != exitOK {
		t.Fatalf("exit %d, want 0; stderr:\n%s", code, stderr)
	}
	for _, want := range []string{
		"What is (17 + 25) * 3",
		"calculator → ok",
		"126", "1024", "1150",
		"answer: (17 + 25) * 3 = 126, 2 ** 10 = 1024, and their sum is 1150.",
		"termination: natural; rounds 3, tool calls 3, rejected 0",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("transcript lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, `"level"`) {
		t.Errorf("logs reached stdout:\n%s", out)
	}
}

// TestRunAnswersThePrompt runs the default demo model on prompts: it
// answers the arithmetic it reads, and says what it can do when it reads
// none.
func TestRunAnswersThePrompt(t *testing.T) {
	code, out, stderr := runCLI(t, "run", "What is 7 times 6? And 2 to the power of 10?")
	if code != exitOK || !strings.Contains(out, "answer: 7 * 6 = 42 and 2 ** 10 = 1024.") {
		t.Errorf("exit %d; stdout:\n%s\nstderr:\n%s", code, out, stderr)
	}
	code, out, stderr = runCLI(t, "run", "Write a haiku about queues")
	if code != exitOK || !strings.Contains(out, "not a language model") || !strings.Contains(out, "termination: natural") {
		t.Errorf("exit %d; stdout:\n%s\nstderr:\n%s", code, out, stderr)
	}
}

func TestRunJSONMatchesSchema(t *testing.T) {
	code, out, stderr := runCLI(t, "run", "--output", "json")
	if code != exitOK {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr)
	}
	sch := compileResultSchema(t)
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(out))
	if err != nil {
		t.Fatalf("stdout is not one JSON document: %v\n%s", err, out)
	}
	if err := sch.Validate(doc); err != nil {
		t.Fatalf("result does not match docs/result.schema.json: %v", err)
	}
	var res struct {
		Messages []json.RawMessage `json:"messages"`
		Calls    []struct {
			CallID string `json:"call_id"`
		}
	}
	json.Unmarshal([]byte(out), &res)
	if len(res.Calls) != 3 {
		t.Fatalf("%d calls, want 3", len(res.Calls))
	}
}

func compileResultSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "..", "docs", "result.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	doc, err := jsonschema.UnmarshalJSON(f)
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("urn:toolfleet:result:v1", doc); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile("urn:toolfleet:result:v1")
	if err != nil {
		t.Fatal(err)
	}
	return sch
}

// badManifest is a manifest file that does not parse.
func badManifest(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tools.json")
	if err := os.WriteFile(path, []byte(`{"tools": [{"name": "x"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestRunMaxRoundsExitStatus(t *testing.T) {
	script := filepath.Join(t.TempDir(), "loop.json")
	os.WriteFile(script, []byte(`{"turns": [
	  {"tool_calls": [{"id": "a", "name": "echo", "arguments": {"text": "1"}}]},
	  {"tool_calls": [{"id": "b", "name": "echo", "arguments": {"text": "2"}}]},
	  {"tool_calls": [{"id": "c", "name": "echo", "arguments": {"text": "3"}}]}
	]}`), 0o600)
	code, out, stderr := runCLI(t, "run", "--model", "scripted:"+script, "--max-rounds", "2", "--output", "json", "go")
	if code != exitMaxRounds {
		t.Fatalf("exit %d, want %d; stderr:\n%s", code, exitMaxRounds, stderr)
	}
	var res struct {
		TerminationReason string            `json:"termination_reason"`
		Messages          []json.RawMessage `json:"messages"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatal(err)
	}
	// user, 2 × (assistant + tool): the transcript is kept.
	if res.TerminationReason != "max_rounds" || len(res.Messages) != 5 {
		t.Fatalf("reason %q with %d messages, want max_rounds with 5", res.TerminationReason, len(res.Messages))
	}
}

// TestRunOpenAIAgainstCompatibleServer drives the coordinator with the
// openai provider against a fake chat-completions server that answers 400
// for any transcript with an unanswered tool_call_id, as the real API does.
func TestRunOpenAIAgainstCompatibleServer(t *testing.T) {
	srv := openaitest.NewServer(t, func(n int, req *openaitest.Request) openaitest.Reply {
		last := req.Messages[len(req.Messages)-1]
		if last.Role != "tool" {
			return openaitest.Reply{ToolCalls: []loop.ToolCall{{
				ID: "call_1", Type: "function",
				Function: loop.FunctionCall{Name: "calculator", Arguments: `{"expression":"2 + 3"}`},
			}}}
		}
		return openaitest.Reply{Content: "The sum is " + last.Text()}
	})
	t.Setenv("OPENAI_API_KEY", "test-key")
	code, out, stderr := runCLI(t, "run", "--model", "openai:test-model", "--model-base-url", srv.URL, "--output", "json", "add 2 and 3")
	if code != exitOK {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr)
	}
	if !strings.Contains(out, `"answer": "The sum is 5"`) {
		t.Fatalf("answer missing:\n%s", out)
	}
	if srv.Rejected() != 0 {
		t.Fatalf("the server rejected %d requests", srv.Rejected())
	}
}

// TestUsageListsEveryCommand: "coordinator" alone lists the commands an
// operator's pages use, tools history and runs id among them.
func TestUsageListsEveryCommand(t *testing.T) {
	code, _, stderr := runCLI(t)
	if code != exitUsage {
		t.Fatalf("exit %d, want %d", code, exitUsage)
	}
	for _, want := range []string{"coordinator tools history", "coordinator runs id", "coordinator provision", "coordinator agents", "coordinator resume"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("usage lacks %q:\n%s", want, stderr)
		}
	}
}
