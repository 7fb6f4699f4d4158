package openai

import (
	"encoding/json"
	"testing"

	sdk "github.com/openai/openai-go/v3"
)

func FuzzToResponse(f *testing.F) {
	f.Add(`{"choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"hi"}}],"usage":{"prompt_tokens":1,"completion_tokens":2}}`)
	f.Add(`{"choices":[{"message":{"tool_calls":[{"id":"a","type":"function","function":{"name":"n","arguments":"{x"}},{"id":"b","function":{"arguments":{"k":1}}},{"id":"c","type":"custom","custom":{"name":"z","input":"q"}}]}}]}`)
	f.Add(`{"choices":[]}`)
	f.Add(`{"choices":null}`)
	f.Add(`[]`)
	f.Fuzz(func(t *testing.T, body string) {
		var cc sdk.ChatCompletion
		if err := json.Unmarshal([]byte(body), &cc); err != nil {
			return
		}
		resp, err := toResponse(&cc)
		if err != nil {
			if len(cc.Choices) != 0 {
				t.Fatalf("error %v with %d choices", err, len(cc.Choices))
			}
			return
		}
		calls := cc.Choices[0].Message.ToolCalls
		if len(resp.Message.ToolCalls) != len(calls) {
			t.Fatalf("%d tool calls mapped from %d", len(resp.Message.ToolCalls), len(calls))
		}
		for i, tc := range resp.Message.ToolCalls {
			if tc.ID != calls[i].ID || tc.Type != "function" {
				t.Fatalf("call %d: %+v from %+v", i, tc, calls[i])
			}
		}
		if resp.Message.Role != "assistant" {
			t.Fatalf("role %q", resp.Message.Role)
		}
	})
}
