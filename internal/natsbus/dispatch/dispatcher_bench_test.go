package dispatch

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// BenchmarkCallMsg builds the messages of a round of 32 echo calls of one
// run, as PublishBatch does before it writes them: each call checked,
// encoded and given its headers, and its tool told to the run's inbox.
// An op is the round; its allocations ÷ 32 are a call's.
func BenchmarkCallMsg(b *testing.B) {
	d := NewDispatcher(nil, nil, protocol.Subjects{}, DispatcherConfig{})
	run := protocol.NewRunID()
	round := make([]loop.Outgoing, 32)
	for i := range round {
		round[i] = loop.Outgoing{Call: protocol.Call{
			V: protocol.Version, RunID: run, Round: 1, CallKey: protocol.NewCallKey(), CallID: "call_abc123",
			Tool: "echo", Arguments: json.RawMessage(`{"text":"` + strings.Repeat("x", 128) + `"}`),
			Deadline: time.Now().Add(time.Minute).UTC(), Attempt: 1, MaxOutputChars: 12000,
		}}
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		d.inboxes.Store(run, &Inbox{run: run}) // a run's inbox, as Open registers it
		for i := range round {
			if _, err := d.callMsg(ctx, &round[i]); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkInboxResult checks and delivers one result of a run's call, as
// the run's inbox does for each result its worker stored.
func BenchmarkInboxResult(b *testing.B) {
	var subjects protocol.Subjects
	run, key := protocol.NewRunID(), protocol.NewCallKey()
	runResults, _ := subjects.ResultsOf(run)
	subject, _ := subjects.Result(run, "echo")
	in := &Inbox{run: run, prefix: strings.TrimSuffix(runResults, ">"), events: make(chan loop.Event, 1)}
	in.Expect(key, "echo")
	r := protocol.Result{V: protocol.Version, RunID: run, CallKey: key, Outcome: protocol.OutcomeOK, Output: "x", Worker: "worker-1", Attempt: 1}
	b.ReportAllocs()
	for b.Loop() {
		in.onOneResult(subject, r)
		if ev := <-in.events; ev.Result == nil {
			b.Fatal("the result was not delivered")
		}
	}
}
