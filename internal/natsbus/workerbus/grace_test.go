package workerbus_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natsbus/bustest"
	"github.com/toolfleet/toolfleet/internal/natsbus/dispatch"
	"github.com/toolfleet/toolfleet/internal/natsbus/workerbus"
	"github.com/toolfleet/toolfleet/internal/natstest"
	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/harness/harnesstest"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/loop/looptest"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// TestWorkerResultGraceFollowsTheCoordinator: a coordinator configured
// with a grace longer than the default makes its calls carry it, and a
// worker keeps trying to publish a result for as long as that coordinator
// waits for it (the call's deadline plus its grace), not for a grace of
// its own. The results stream goes away while the call runs and comes back
// only once the worker's first round of attempts (5s) and the default
// grace past the call's deadline (2s from its start) are over: the result
// is stored all the same.
func TestWorkerResultGraceFollowsTheCoordinator(t *testing.T) {
	t.Parallel() // its own server; it waits on the fleet, not the CPU
	f := bustest.NewFleet(t)
	var gone atomic.Int64 // when the tool removed the results stream (Unix ns)
	outage := harness.Tool{Name: "outage", Parameters: bustest.EmptyObject, Idempotent: true,
		Run: func(ctx context.Context, _ json.RawMessage) (string, error) {
			if gone.Load() == 0 {
				if err := f.JS.DeleteStream(ctx, f.Subjects.ResultsStream()); err != nil {
					return "", err
				}
				gone.Store(time.Now().UnixNano())
			}
			return "survived the outage", nil
		}}
	h := harnesstest.New(t, harness.Config{}, outage)
	f.StartWorker(t, h, workerbus.WorkerConfig{})

	const grace = time.Minute
	cfg := loop.Config{ToolTimeout: 2 * time.Second, Grace: grace, Logger: f.Log.Logger()}
	model := looptest.NewModel(looptest.Calls(looptest.Call("c1", "outage", `{}`)), looptest.Answer("done"))
	r, err := loop.New(cfg, model, looptest.NewCatalog(h.Specs()...), f.Dispatcher(dispatch.DispatcherConfig{}), nil)
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Run(rctx, "go") }()
	t.Cleanup(func() { cancel(); <-done })

	natstest.WaitFor(t, 30*time.Second, func() error {
		if gone.Load() == 0 {
			return errors.New("the tool has not run")
		}
		return nil
	})
	// The outage lasts past every bound but the coordinator's grace: the
	// worker's first round of attempts and the default grace past the
	// call's deadline. Only the clock can say when that is.
	back := time.Unix(0, gone.Load()).Add(7 * time.Second)
	natstest.WaitFor(t, 30*time.Second, func() error {
		if time.Now().Before(back) {
			return errors.New("the outage goes on")
		}
		return nil
	})
	if err := natsbus.EnsureStreams(bustest.Ctx(t), f.JS, f.Subjects, natsbus.StreamConfig{}); err != nil {
		t.Fatalf("EnsureStreams: %v", err)
	}
	natstest.WaitFor(t, 30*time.Second, func() error {
		st, err := f.JS.Stream(bustest.Ctx(t), f.Subjects.ResultsStream())
		if err != nil {
			return err
		}
		m, err := st.GetLastMsgForSubject(bustest.Ctx(t), f.Subjects.Results())
		if err != nil {
			return fmt.Errorf("no result stored: %w", err)
		}
		res, err := protocol.DecodeResult(m.Data, 0)
		if err != nil || res.Outcome != protocol.OutcomeOK || res.Output != "survived the outage" {
			return fmt.Errorf("stored %+v (%v), want the tool's output", res, err)
		}
		return nil
	})
}
