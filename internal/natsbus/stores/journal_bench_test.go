package stores_test

import (
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/coordinator"
	"github.com/toolfleet/toolfleet/internal/natsbus/stores"
	"github.com/toolfleet/toolfleet/internal/natstest"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// BenchmarkJournalAppend times one fenced append of a round's batch (the
// round before's observations, the model response, the dispatch) beside
// a plain JetStream publish of the same bytes to the same stream, on a
// server doing nothing else: what the journal adds to a round over the
// store itself.
func BenchmarkJournalAppend(b *testing.B) {
	srv := natstest.Start(b)
	nc := natstest.Connect(b, srv)
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	s := protocol.Subjects{}
	if _, err := js.CreateStream(b.Context(), coordinator.JournalStreamConfig(s)); err != nil {
		b.Fatal(err)
	}
	batch := []loop.JournalEntry{
		{Kind: loop.EntryObserved, Round: 1, Observations: []loop.JournaledObservation{{CallKey: "k1", Outcome: protocol.OutcomeOK, Content: "echo"}}},
		{Kind: loop.EntryModel, Round: 2, Response: &loop.JournaledResponse{Message: loop.Message{Role: "assistant",
			ToolCalls: []loop.ToolCall{{ID: "c1", Type: "function", Function: loop.FunctionCall{Name: "echo", Arguments: `{"text":"x"}`}}}}}},
		{Kind: loop.EntryDispatched, Round: 2, Calls: []loop.JournaledCall{{CallKey: "k2", Tool: "echo", TimeoutMS: 30000}}},
	}
	b.Run("fenced append", func(b *testing.B) {
		run := protocol.NewRunID()
		j, err := stores.OpenJournal(b.Context(), js, s, run, "bench", stores.NoteStart)
		if err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if err := j.AppendBatch(b.Context(), batch); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("publish", func(b *testing.B) {
		subject, _ := s.Journal(protocol.NewRunID())
		data := []byte(`[{"kind":"observed","round":1,"observations":[{"call_key":"k1","outcome":"ok","content":"echo"}]},{"kind":"model","round":2,"response":{"message":{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"echo","arguments":"{\"text\":\"x\"}"}}]},"usage":{}}},{"kind":"dispatched","round":2,"calls":[{"call_key":"k2","tool":"echo","timeout_ms":30000}]}]`)
		for b.Loop() {
			if _, err := js.Publish(b.Context(), subject, data); err != nil {
				b.Fatal(err)
			}
		}
	})
}
