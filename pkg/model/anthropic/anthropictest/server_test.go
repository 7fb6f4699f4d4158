package anthropictest_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/toolfleet/toolfleet/pkg/model/anthropic/anthropictest"
)

func check(t *testing.T, body string) string {
	t.Helper()
	var req anthropictest.Request
	if err := json.Unmarshal([]byte(body), &req); err != nil {
		t.Fatal(err)
	}
	return anthropictest.Check(&req)
}

const tools = `"tools":[{"name":"t","input_schema":{"type":"object"}}]`

func TestCheckRefusesWhatTheAPIRefuses(t *testing.T) {
	use := `{"role":"assistant","content":[{"type":"tool_use","id":"a","name":"t","input":{}},{"type":"tool_use","id":"b","name":"t","input":{}}]}`
	tests := []struct{ name, body, want string }{
		{"valid", `{"model":"m","max_tokens":1,` + tools + `,"messages":[{"role":"user","content":"x"},` + use + `,{"role":"user","content":[{"type":"tool_result","tool_use_id":"b","content":"1"},{"type":"tool_result","tool_use_id":"a","content":"2","is_error":true},{"type":"text","text":"more"}]}]}`, ""},
		{"unanswered", `{"model":"m","max_tokens":1,` + tools + `,"messages":[{"role":"user","content":"x"},` + use + `,{"role":"user","content":[{"type":"tool_result","tool_use_id":"a","content":"1"}]}]}`, "`tool_use` ids were found without `tool_result` blocks immediately after: b."},
		{"last message unanswered", `{"model":"m","max_tokens":1,` + tools + `,"messages":[{"role":"user","content":"x"},` + use + `]}`, "immediately after: a, b."},
		{"unexpected result", `{"model":"m","max_tokens":1,` + tools + `,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"z","content":"1"}]}]}`, "unexpected `tool_use_id` found in `tool_result` blocks: z."},
		{"answered twice", `{"model":"m","max_tokens":1,` + tools + `,"messages":[{"role":"user","content":"x"},` + use + `,{"role":"user","content":[{"type":"tool_result","tool_use_id":"a"},{"type":"tool_result","tool_use_id":"a"},{"type":"tool_result","tool_use_id":"b"}]}]}`, "unexpected `tool_use_id`"},
		{"result after text", `{"model":"m","max_tokens":1,` + tools + `,"messages":[{"role":"user","content":"x"},` + use + `,{"role":"user","content":[{"type":"text","text":"hm"},{"type":"tool_result","tool_use_id":"a"},{"type":"tool_result","tool_use_id":"b"}]}]}`, "must come first"},
		{"repeated id", `{"model":"m","max_tokens":1,` + tools + `,"messages":[{"role":"user","content":"x"},{"role":"assistant","content":[{"type":"tool_use","id":"a","name":"t","input":{}},{"type":"tool_use","id":"a","name":"t","input":{}}]}]}`, "ids must be unique"},
		{"no tools defined", `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"x"},{"role":"assistant","content":[{"type":"tool_use","id":"a","name":"t","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"a"}]}]}`, "must define tools"},
		{"empty text", `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"text","text":" "}]}]}`, "non-whitespace"},
		{"bad tool name", `{"model":"m","max_tokens":1,"tools":[{"name":"a.b","input_schema":{"type":"object"}}],"messages":[{"role":"user","content":"x"}]}`, "String should match pattern"},
		{"bad schema", `{"model":"m","max_tokens":1,"tools":[{"name":"a","input_schema":{"type":"object","oneOf":[]}}],"messages":[{"role":"user","content":"x"}]}`, "does not support oneOf"},
		{"no max_tokens", `{"model":"m","messages":[{"role":"user","content":"x"}]}`, "max_tokens: Field required"},
		{"input not an object", `{"model":"m","max_tokens":1,` + tools + `,"messages":[{"role":"user","content":"x"},{"role":"assistant","content":[{"type":"tool_use","id":"a","name":"t","input":"s"}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"a"}]}]}`, "valid dictionary"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := check(t, tt.body)
			if tt.want == "" && got != "" || tt.want != "" && !strings.Contains(got, tt.want) {
				t.Fatalf("Check = %q, want %q", got, tt.want)
			}
		})
	}
}

func FuzzCheck(f *testing.F) {
	f.Add(`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"x"}]}`)
	f.Add(`{"model":"m","max_tokens":1,"tools":[{"name":"t","input_schema":{"type":"object"}}],"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"a","name":"t","input":{}}]}]}`)
	f.Fuzz(func(t *testing.T, body string) {
		var req anthropictest.Request
		if json.Unmarshal([]byte(body), &req) != nil {
			return
		}
		_ = anthropictest.Check(&req) // never panics
	})
}
