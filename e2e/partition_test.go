package e2e

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/internal/natstest"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// TestCoordinatorPartitionedWhileWorkerAnswers: the coordinator loses its
// connection while a worker finishes a call and publishes the result. The
// results stream keeps the result; once the coordinator is reconnected it
// reads it from there and the model gets the tool's output, not a timeout.
func TestCoordinatorPartitionedWhileWorkerAnswers(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	f.startWorker("w1")
	px := newProxy(t, f.url())
	coord := f.coordinatorAt(px.url(), "coordinator", script{
		turn(call("c1", toolWork, map[string]any{"id": "p", "sleep_ms": 1000})),
		final("done"),
	}, "--tool-timeout", "10s")

	f.waitStarted("p", 1, 15*time.Second)
	px.partition()
	natstest.WaitFor(t, 10*time.Second, func() error {
		if runs := f.runsOf("p"); !runs[0].done {
			return errors.New("the tool has not finished")
		}
		info, err := f.js.Stream(context.Background(), protocol.Subjects{}.ResultsStream())
		if err != nil {
			return err
		}
		if info.CachedInfo().State.Msgs == 0 {
			return errors.New("no result stored yet")
		}
		return nil
	})
	px.heal()

	res := coord.result(30*time.Second, 0)
	recs, _ := answered(t, res)
	if rec := recs["c1"]; rec.Outcome != protocol.OutcomeOK || rec.Worker != "w1" {
		t.Fatalf("call = %+v, want ok from w1 (the result published during the partition)", rec)
	}
	if !strings.Contains(coord.log(), "reconnected to NATS") {
		t.Fatal("the coordinator was not partitioned: it never reconnected")
	}
}
