package openaitest

import (
	"encoding/json"
	"testing"
)

func FuzzCheck(f *testing.F) {
	f.Add(`{"model":"m","messages":[{"role":"user","content":"x"},{"role":"assistant","tool_calls":[{"id":"a"},{"id":"a"}]},{"role":"tool","tool_call_id":"a"}]}`)
	f.Add(`{"model":"m","messages":[{"role":"tool","tool_call_id":""}]}`)
	f.Add(`{"model":"m","messages":[{"role":"assistant","tool_calls":[{"id":""}]},{"role":"tool","tool_call_id":""},{"role":"tool","tool_call_id":""}]}`)
	f.Fuzz(func(t *testing.T, body string) {
		var req Request
		if json.Unmarshal([]byte(body), &req) != nil {
			return
		}
		msg, _ := Check(&req)
		if msg != "" {
			return
		}
		// Accepted: every call id of every assistant message is answered
		// by exactly one of the tool messages that follow it.
		for i, m := range req.Messages {
			if m.Role != "assistant" || len(m.ToolCalls) == 0 {
				continue
			}
			answers := map[string]int{}
			for _, next := range req.Messages[i+1:] {
				if next.Role != "tool" {
					break
				}
				answers[next.ToolCallID]++
			}
			for _, tc := range m.ToolCalls {
				if answers[tc.ID] != 1 {
					t.Fatalf("accepted with call %q answered %d times", tc.ID, answers[tc.ID])
				}
			}
		}
	})
}
