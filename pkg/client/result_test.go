package client_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/pkg/client"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// TestLoopResultReadsCallsByID: a stored result's calls are read by
// tool_call_id with their outcome, duration, worker and the content of
// the tool message answering them; without a transcript, the calls are
// there without observations; calls that are not the loop's records are an
// error, not an empty list.
func TestLoopResultReadsCallsByID(t *testing.T) {
	calls, _ := json.Marshal([]loop.CallRecord{
		{Round: 1, CallID: "c1", CallKey: "k1", Tool: "lookup", Outcome: protocol.OutcomeOK, DurationMS: 1500, Worker: "w-1", Attempt: 1},
		{Round: 1, CallID: "c2", CallKey: "k2", Tool: "lookup", Outcome: protocol.OutcomeDenied, DurationMS: 7},
	})
	messages, _ := json.Marshal([]loop.Message{
		{Role: "user", Content: "where is A-17?"},
		{Role: "assistant", ToolCalls: []loop.ToolCall{{ID: "c1", Type: "function"}, {ID: "c2", Type: "function"}}},
		{Role: "tool", ToolCallID: "c1", Content: "shipped"},
		{Role: "tool", ToolCallID: "c2", Content: "Call denied by approver: no"},
		{Role: "assistant", Content: "It shipped."},
	})
	res := &protocol.RunResult{V: protocol.Version, RunID: "r1", Answer: "It shipped.", TerminationReason: "natural",
		Metadata: json.RawMessage(`{"rounds":2}`), Calls: calls, Messages: messages}
	lr, err := client.LoopResult(res)
	if err != nil {
		t.Fatal(err)
	}
	c1, ok := lr.Call("c1")
	want := loop.CallResult{CallID: "c1", Round: 1, Tool: "lookup", Outcome: protocol.OutcomeOK, Observation: "shipped",
		Duration: 1500 * time.Millisecond, Worker: "w-1", Attempt: 1, CallKey: "k1"}
	if !ok || c1 != want {
		t.Fatalf("Call(c1) = %+v, %v; want %+v", c1, ok, want)
	}
	if c2, _ := lr.Call("c2"); c2.Outcome != protocol.OutcomeDenied || c2.Observation != "Call denied by approver: no" {
		t.Fatalf("Call(c2) = %+v", c2)
	}
	if lr.Answer != res.Answer || lr.TerminationReason != loop.TerminationNatural || lr.Metadata.Rounds != 2 || len(lr.CallResults()) != 2 {
		t.Fatalf("LoopResult = %+v", lr)
	}

	res.Messages, res.TranscriptOmitted = nil, true
	if lr, err = client.LoopResult(res); err != nil {
		t.Fatal(err)
	}
	if c1, ok := lr.Call("c1"); !ok || c1.Observation != "" || c1.Outcome != protocol.OutcomeOK {
		t.Fatalf("without a transcript: Call(c1) = %+v, %v; want the call without its observation", c1, ok)
	}

	res.Calls = json.RawMessage(`{"c1": "ok"}`)
	if lr, err := client.LoopResult(res); err == nil {
		t.Fatalf("calls that are no records: %+v, want an error", lr)
	}
}
