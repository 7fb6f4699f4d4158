package scripted_test

import (
	"context"
	"fmt"

	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/model/scripted"
)

func Example() {
	m, err := scripted.Parse([]byte(`{"turns": [
		{"tool_calls": [{"id": "c1", "name": "calculator", "arguments": {"expression": "6 * 7"}}]},
		{"content": "The answer is {{result \"c1\"}}."}
	]}`))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	msgs := []loop.Message{{Role: "user", Content: "What is 6 * 7?"}}

	resp, _ := m.Complete(ctx, loop.Request{Messages: msgs})
	tc := resp.Message.ToolCalls[0]
	fmt.Println(tc.ID, tc.Function.Name, tc.Function.Arguments)

	msgs = append(msgs, resp.Message, loop.Message{Role: "tool", ToolCallID: tc.ID, Content: "42"})
	resp, _ = m.Complete(ctx, loop.Request{Messages: msgs})
	fmt.Println(resp.Message.Content)

	msgs = append(msgs, resp.Message)
	resp, _ = m.Complete(ctx, loop.Request{Messages: msgs})
	fmt.Println(resp.Message.Content)
	// Output:
	// c1 calculator {"expression":"6 * 7"}
	// The answer is 42.
	// (script ended)
}
