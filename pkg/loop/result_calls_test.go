package loop_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/loop/looptest"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// A run's calls by tool_call_id: how each ended, what the model read and
// which worker ran it.
func ExampleResult_Call() {
	model := looptest.NewModel(
		looptest.Calls(
			looptest.Call("c1", "echo", `{"text":"hello"}`),
			looptest.Call("c2", "echo", `{"text":42}`),
			looptest.Call("c3", "translate", `{}`)),
		looptest.Answer("done"),
	)
	catalog := looptest.NewCatalog(looptest.MustSpec("echo", echoSchema))
	fleet := looptest.New(handler)
	r, err := loop.New(loop.Config{}, model, catalog, fleet, nil)
	if err != nil {
		panic(err)
	}
	res, err := r.Run(context.Background(), "Say hello.")
	if err != nil {
		panic(err)
	}
	c1, _ := res.Call("c1")
	fmt.Printf("c1: %s %q by %s\n", c1.Outcome, c1.Observation, c1.Worker)
	c3, _ := res.Call("c3")
	fmt.Printf("c3: %s %q\n", c3.Outcome, c3.Observation)
	for _, c := range res.CallResults() {
		fmt.Println(c.CallID, c.Tool, c.Outcome)
	}
	// Output:
	// c1: ok "hello" by looptest
	// c3: unknown_tool "Error: Unknown tool 'translate'"
	// c1 echo ok
	// c2 echo invalid_arguments
	// c3 translate unknown_tool
}

// TestResultCallByID: each call of a run is found by its tool_call_id with
// its record's outcome, duration, worker and key and the content of the
// tool message that answered it; an id the run did not make is not found,
// nor is one of the input transcript.
func TestResultCallByID(t *testing.T) {
	e := newEnv(t, fastConfig(), looptest.NewModel(
		looptest.Calls(looptest.Call("a", "echo", `{"text":"one"}`), looptest.Call("b", "fail", `{}`)),
		looptest.Answer("done")), nil, nil)
	res, err := e.run(t, "go")
	if err != nil {
		t.Fatal(err)
	}
	all := res.CallResults()
	if len(all) != len(res.Calls) || len(all) != 2 {
		t.Fatalf("CallResults = %+v, want one per record of %+v", all, res.Calls)
	}
	for i, rec := range res.Calls {
		got, ok := res.Call(rec.CallID)
		if !ok || got != all[i] {
			t.Fatalf("Call(%q) = %+v, %v; want %+v", rec.CallID, got, ok, all[i])
		}
		var content string
		for _, m := range res.Messages {
			if m.Role == "tool" && m.ToolCallID == rec.CallID {
				content = m.Content
			}
		}
		if got.Observation != content || got.Outcome != rec.Outcome || got.Worker != rec.Worker || got.CallKey != rec.CallKey ||
			got.Duration.Milliseconds() != rec.DurationMS || got.Round != rec.Round || got.Tool != rec.Tool || got.ErrorType != rec.ErrorType {
			t.Errorf("Call(%q) = %+v, want record %+v and observation %q", rec.CallID, got, rec, content)
		}
	}
	a, _ := res.Call("a")
	b, _ := res.Call("b")
	if a.Outcome != protocol.OutcomeOK || a.Observation != "one" || a.Worker != "looptest" ||
		b.Outcome != protocol.OutcomeFailed || b.Observation != "Tool 'fail' failed: *errors.errorString" {
		t.Fatalf("a = %+v, b = %+v", a, b)
	}
	if c, ok := res.Call("nobody"); ok {
		t.Fatalf("Call(nobody) = %+v, want not found", c)
	}
}
