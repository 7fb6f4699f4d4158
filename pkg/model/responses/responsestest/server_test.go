package responsestest_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/toolfleet/toolfleet/pkg/model/responses/responsestest"
)

func items(t *testing.T, s string) []responsestest.Item {
	t.Helper()
	var it []responsestest.Item
	if err := json.Unmarshal([]byte(s), &it); err != nil {
		t.Fatal(err)
	}
	return it
}

func TestCheckRefusesWhatTheAPIRefuses(t *testing.T) {
	call := `{"type":"function_call","call_id":"a","name":"t","arguments":"{}"}`
	tests := []struct{ name, tools, input, want string }{
		{"valid", "", `[{"type":"message","role":"user","content":"x"},` + call + `,{"type":"function_call_output","call_id":"a","output":"1"}]`, ""},
		{"unanswered", "", `[` + call + `]`, "No tool output found for function call a."},
		{"orphan output", "", `[{"type":"function_call_output","call_id":"z","output":"1"}]`, "No tool call found for function call output with call_id z."},
		{"answered twice", "", `[` + call + `,{"type":"function_call_output","call_id":"a","output":"1"},{"type":"function_call_output","call_id":"a","output":"1"}]`, "Duplicate function_call_output"},
		{"repeated call id", "", `[` + call + `,` + call + `]`, "Duplicate value for 'call_id'"},
		{"chat-shaped tool", `[{"type":"function","function":{"name":"t"}}]`, `[{"type":"message","role":"user","content":"x"}]`, "Missing required parameter: 'tools[0].name'."},
		{"bad tool name", `[{"type":"function","name":"a b"}]`, `[{"type":"message","role":"user","content":"x"}]`, "does not match pattern"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := &responsestest.Request{Model: "m", Input: items(t, tt.input)}
			if tt.tools != "" {
				if err := json.Unmarshal([]byte(tt.tools), &req.Tools); err != nil {
					t.Fatal(err)
				}
			}
			got, _ := responsestest.Check(req, req.Input)
			if tt.want == "" && got != "" || tt.want != "" && !strings.Contains(got, tt.want) {
				t.Fatalf("Check = %q, want %q", got, tt.want)
			}
		})
	}
}

func FuzzCheck(f *testing.F) {
	f.Add(`[{"type":"function_call","call_id":"a","name":"t","arguments":"{}"},{"type":"function_call_output","call_id":"a","output":"1"}]`)
	f.Fuzz(func(t *testing.T, input string) {
		var it []responsestest.Item
		if json.Unmarshal([]byte(input), &it) != nil {
			return
		}
		req := &responsestest.Request{Model: "m", Input: it}
		_, _ = responsestest.Check(req, it)
	})
}
