package looptest

import (
	"fmt"

	"github.com/toolfleet/toolfleet/pkg/loop"
)

// CheckTranscript enforces the rule model APIs apply (they answer HTTP 400
// otherwise), a little more strictly: each assistant message's tool calls
// have non-empty ids, unique in the whole transcript, and are followed
// immediately by exactly one tool message per id, in request order; no tool
// message appears anywhere else; roles are system, user, assistant or tool.
func CheckTranscript(msgs []loop.Message) error {
	seen := map[string]int{}
	var want []string // ids still to be answered, in order
	for i, m := range msgs {
		switch m.Role {
		case "system", "user", "assistant", "tool":
		default:
			return fmt.Errorf("message %d: unknown role %q", i, m.Role)
		}
		if m.Role == "tool" {
			if len(want) == 0 {
				return fmt.Errorf("message %d: tool message for %q answers no open tool call", i, m.ToolCallID)
			}
			if m.ToolCallID != want[0] {
				return fmt.Errorf("message %d: tool message for %q, want one for %q", i, m.ToolCallID, want[0])
			}
			want = want[1:]
			continue
		}
		if len(want) > 0 {
			return fmt.Errorf("message %d: an assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id' (%q is not answered)", i, want[0])
		}
		if len(m.ToolCalls) > 0 && m.Role != "assistant" {
			return fmt.Errorf("message %d: role %q carries tool calls", i, m.Role)
		}
		for _, tc := range m.ToolCalls {
			if tc.ID == "" {
				return fmt.Errorf("message %d: tool call with an empty id", i)
			}
			if j, dup := seen[tc.ID]; dup {
				return fmt.Errorf("message %d: tool call id %q already used in message %d", i, tc.ID, j)
			}
			seen[tc.ID] = i
			want = append(want, tc.ID)
		}
	}
	if len(want) > 0 {
		return fmt.Errorf("an assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id' (%q is not answered)", want[0])
	}
	return nil
}
