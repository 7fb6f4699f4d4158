package bustest

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/natsbus/workerbus"
	"github.com/toolfleet/toolfleet/internal/natstest"
	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/harness/harnesstest"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// TakeCalls is a pull consumer of tool's calls that the test reads in
// place of a worker (the worker's own durable name: a work queue admits
// one consumer per subject).
func (f *Fleet) TakeCalls(t *testing.T, tool protocol.ToolName, ackWait time.Duration) jetstream.Consumer {
	t.Helper()
	subject, _ := f.Subjects.Call(tool, protocol.ClassInteractive, protocol.DefaultClient)
	durable, _ := f.Subjects.Consumer(tool)
	c, err := f.JS.CreateOrUpdateConsumer(Ctx(t), f.Subjects.CallsStream(), jetstream.ConsumerConfig{
		Durable: durable, FilterSubject: subject, AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait, MaxDeliver: 5,
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Claimer is a worker of "charge", not running, on its own connection,
// whose claims the test makes itself.
func (f *Fleet) Claimer(t *testing.T, name string, runs *atomic.Int64) *workerbus.Worker {
	t.Helper()
	nc := natstest.Connect(t, f.Srv)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	w, err := workerbus.NewWorker(nc, js, f.Subjects, harnesstest.New(t, harness.Config{}, Counting("charge", runs, 0, false)),
		workerbus.WorkerConfig{Name: name, Logger: f.Log.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// StartRecord returns the start record stored for the call, or nil.
func (f *Fleet) StartRecord(t *testing.T, call protocol.Call) *jetstream.RawStreamMsg {
	t.Helper()
	subject, _ := f.Subjects.Start(call.Tool, call.RunID, call.CallKey)
	st, err := f.JS.Stream(Ctx(t), f.Subjects.StartsStream())
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.GetLastMsgForSubject(Ctx(t), subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return m
}
