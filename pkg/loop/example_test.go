package loop_test

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/loop/looptest"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

func ExampleRunner() {
	// A scripted model: call the echo tool, then answer.
	model := looptest.NewModel(
		looptest.Calls(looptest.Call("call_1", "echo", `{"text":"hello"}`)),
		looptest.Answer("The tool said hello."),
	)
	catalog := looptest.NewCatalog(looptest.MustSpec("echo",
		`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"],"additionalProperties":false}`))
	// An in-memory fleet whose one worker echoes the text back.
	fleet := looptest.New(func(ctx context.Context, c protocol.Call) (protocol.Result, bool) {
		var args struct {
			Text string `json:"text"`
		}
		_ = json.Unmarshal(c.Arguments, &args)
		return looptest.OK(args.Text), true
	})

	r, err := loop.New(loop.Config{}, model, catalog, fleet, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	res, err := r.Run(context.Background(), "Say hello with the echo tool.")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(res.TerminationReason, res.Metadata.Rounds, res.Metadata.ToolCallsMade)
	for _, m := range res.Messages {
		for _, tc := range m.ToolCalls {
			fmt.Printf("%s calls %s %s\n", m.Role, tc.Function.Name, tc.Function.Arguments)
		}
		if m.Content != "" {
			fmt.Printf("%s: %s\n", m.Role, m.Content)
		}
	}
	// Output:
	// natural 2 1
	// user: Say hello with the echo tool.
	// assistant calls echo {"text":"hello"}
	// tool: hello
	// assistant: The tool said hello.
}
