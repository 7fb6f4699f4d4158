package loop_test

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/loop/looptest"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// recordExample runs a durable run whose model echoes "hello", then
// answers, and returns its journal.
func recordExample() []loop.JournalEntry {
	catalog := looptest.NewCatalog(looptest.MustSpec("echo",
		`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"],"additionalProperties":false}`))
	fleet := looptest.New(func(ctx context.Context, c protocol.Call) (protocol.Result, bool) {
		var args struct {
			Text string `json:"text"`
		}
		_ = json.Unmarshal(c.Arguments, &args)
		return looptest.OK(args.Text), true
	})
	model := looptest.NewModel(
		looptest.Calls(looptest.Call("call_1", "echo", `{"text":"hello"}`)),
		looptest.Answer("The tool said hello."),
	)
	r, _ := loop.New(loop.Config{}, model, catalog, fleet, nil)
	j := looptest.NewJournal()
	_, _ = r.RunDurable(context.Background(), loop.Durable{RunID: "run-1", Journal: j, Prompt: "Say hello."})
	fleet.Wait()
	return j.Resume(-1).Entries()
}

func ExampleReplay() {
	entries := recordExample()
	// The new model echoes "hi" instead: the journal cannot answer that
	// call, which is answered not_replayed; nothing runs.
	model := looptest.NewModel(
		looptest.Calls(looptest.Call("call_1", "echo", `{"text":"hi"}`)),
		looptest.Answer("The tool said nothing."),
	)
	rep, err := loop.Replay(context.Background(), loop.Config{}, model, loop.ReplayInput{Entries: entries})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("diverged:", rep.Diverged, "in round", rep.FirstDivergingRound)
	for _, d := range rep.Rounds {
		for _, c := range d.Changed {
			fmt.Printf("round %d: %s {%v} changed its arguments\n", d.Round, c.To.Tool, c.To.ArgKeys[0])
		}
		if d.AnswerChanged {
			fmt.Printf("round %d: the answer changed\n", d.Round)
		}
	}
	fmt.Println("from the journal:", rep.ReplayedCalls, "not replayed:", rep.NotReplayedCalls)
	// Output:
	// diverged: true in round 1
	// round 1: echo {text} changed its arguments
	// round 2: the answer changed
	// from the journal: 0 not replayed: 1
}

func ExampleForkMessages() {
	entries := recordExample()
	// The transcript before round 2: the input and round 1, its call
	// answered as the journal says.
	msgs, err := loop.ForkMessages(context.Background(), entries, 2)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, m := range msgs {
		fmt.Println(m.Role, m.Content, len(m.ToolCalls))
	}
	// Output:
	// user Say hello. 0
	// assistant  1
	// tool hello 0
}
