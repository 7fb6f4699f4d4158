package responses

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	sdk "github.com/openai/openai-go/v3/responses"

	"github.com/toolfleet/toolfleet/pkg/model/transcript"
)

func FuzzToResponse(f *testing.F) {
	for _, n := range []string{"response_function_calls.json", "response_message.json", "response_incomplete_function_call.json"} {
		b, err := os.ReadFile(filepath.Join("testdata", n))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(b))
	}
	f.Add(`{"status":"failed","output":[{"type":"function_call","call_id":"a","arguments":{"x":1}}]}`)
	f.Add(`{"output":[{"type":"custom_tool_call","call_id":"a","name":"n","input":"q"},{"type":"message","content":[{"type":"refusal","refusal":"no"}]}]}`)
	f.Fuzz(func(t *testing.T, body string) {
		var r sdk.Response
		if err := json.Unmarshal([]byte(body), &r); err != nil {
			return
		}
		resp, err := toResponse(&r)
		if err != nil {
			return
		}
		n := 0
		for _, it := range r.Output {
			if it.Type == "function_call" || it.Type == "custom_tool_call" {
				n++
			}
		}
		if len(resp.Message.ToolCalls) != n {
			t.Fatalf("%d calls from %d call items", len(resp.Message.ToolCalls), n)
		}
	})
}

func FuzzDecodeTranscript(f *testing.F) {
	f.Add(`[{"role":"user","content":"hi"},{"type":"function_call","call_id":"a","name":"n","arguments":"{}"},{"type":"function_call_output","call_id":"a","output":"x"}]`)
	f.Add(`{"instructions":"s","input":[{"type":"message","role":"assistant","content":[{"type":"output_text","text":"t"}]}]}`)
	f.Fuzz(func(t *testing.T, data string) {
		msgs, err := transcript.DecodeResponses([]byte(data))
		if err != nil {
			return
		}
		if _, err := ToInput(msgs); err != nil {
			t.Fatalf("ToInput: %v", err)
		}
	})
}
