package workerbus_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/natsbus/bustest"
	"github.com/toolfleet/toolfleet/internal/natsbus/workerbus"
	"github.com/toolfleet/toolfleet/pkg/harness"
)

// TestWorkerRefusesAForeignConsumer: a tool's consumer that is a push
// consumer (its deliver subject could name any subject of the fleet) is
// not one a worker serves, nor turns into its own: Run fails, naming it,
// and the consumer is left as it was.
func TestWorkerRefusesAForeignConsumer(t *testing.T) {
	t.Parallel()
	f := bustest.NewFleet(t)
	h, err := harness.New(harness.Config{}, harness.Echo())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.JS.CreateConsumer(bustest.Ctx(t), f.Subjects.CallsStream(), jetstream.ConsumerConfig{
		Durable: "tool_echo", FilterSubject: "fleet.call.echo.interactive.*", DeliverSubject: "fleet.approval.decision.r.k",
		AckPolicy: jetstream.AckExplicitPolicy,
	}); err != nil {
		t.Fatal(err)
	}
	w, err := workerbus.NewWorker(f.NC, f.JS, f.Subjects, h, workerbus.WorkerConfig{Logger: f.Log.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	err = w.Run(rctx)
	if err == nil || rctx.Err() != nil || !strings.Contains(err.Error(), "tool_echo") || !strings.Contains(err.Error(), "not a pull consumer") {
		t.Fatalf("Run = %v, want a failure naming tool_echo as not a pull consumer", err)
	}
	st, err := f.JS.Stream(bustest.Ctx(t), f.Subjects.CallsStream())
	if err != nil {
		t.Fatal(err)
	}
	list := st.ListConsumers(bustest.Ctx(t))
	for info := range list.Info() {
		if info.Name == "tool_echo" && info.Config.DeliverSubject != "fleet.approval.decision.r.k" {
			t.Errorf("the consumer's deliver subject is %q after the worker's start, want it left as it was", info.Config.DeliverSubject)
		}
	}
	if err := list.Err(); err != nil {
		t.Fatal(err)
	}
}
