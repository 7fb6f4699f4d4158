package dispatch_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/natsbus/bustest"
	"github.com/toolfleet/toolfleet/internal/natsbus/dispatch"
	"github.com/toolfleet/toolfleet/pkg/loop/dispatchertest"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// TestDispatcherConformance holds the NATS Dispatcher to the
// loop.Dispatcher contract the in-memory one is held to, on an embedded
// server. The workers are played by a plain consumer of the calls stream
// that answers on the results stream, as a worker does.
func TestDispatcherConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a NATS server per clause")
	}
	dispatchertest.Run(t, func(t *testing.T, h dispatchertest.Handler) dispatchertest.Fleet {
		f := bustest.NewFleet(t)
		// A worker's publish may still wait for its PubAck when the
		// result has reached the inbox and the clause ends: the clause
		// waits for its workers before the connection closes.
		var working sync.WaitGroup
		t.Cleanup(working.Wait)
		const inboxSize = 8
		d := dispatch.NewDispatcher(f.NC, f.JS, f.Subjects, dispatch.DispatcherConfig{Logger: f.Log.Logger(), InboxSize: inboxSize})
		send := func(t testing.TB, tool protocol.ToolName, r protocol.Result) {
			subj, err := f.Subjects.Result(r.RunID, tool)
			if err != nil {
				t.Errorf("result subject: %v", err)
				return
			}
			data, err := protocol.Encode(&r)
			if err != nil {
				t.Errorf("encoding a result: %v", err)
				return
			}
			pctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if _, err := f.JS.Publish(pctx, subj, data); err != nil {
				t.Errorf("publishing a result: %v", err)
			}
		}
		cons, err := f.JS.CreateOrUpdateConsumer(bustest.Ctx(t), f.Subjects.CallsStream(), jetstream.ConsumerConfig{
			Durable: "conformance", FilterSubject: f.Subjects.Calls(), AckPolicy: jetstream.AckExplicitPolicy,
		})
		if err != nil {
			t.Fatalf("calls consumer: %v", err)
		}
		cc, err := cons.Consume(func(m jetstream.Msg) {
			m.Ack()
			c, err := protocol.DecodeCall(m.Data(), 1<<20)
			if err != nil {
				t.Errorf("a published call does not decode: %v", err)
				return
			}
			working.Add(1)
			go func() {
				defer working.Done()
				hctx, cancel := context.WithDeadline(context.Background(), c.Deadline)
				defer cancel()
				r, ok := h(hctx, c)
				if !ok {
					return
				}
				r.V, r.RunID, r.CallKey, r.Worker, r.Attempt = protocol.Version, c.RunID, c.CallKey, "conformance", c.Attempt
				if r.Outcome == "" {
					r.Outcome = protocol.OutcomeOK
				}
				send(t, c.Tool, r)
			}()
		})
		if err != nil {
			t.Fatalf("consuming calls: %v", err)
		}
		t.Cleanup(cc.Stop)
		return dispatchertest.Fleet{Dispatcher: d, Send: send, InboxSize: inboxSize}
	})
}
