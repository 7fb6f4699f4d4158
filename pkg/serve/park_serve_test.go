package serve_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/internal/natstest"
	"github.com/toolfleet/toolfleet/pkg/client"
	"github.com/toolfleet/toolfleet/pkg/fleettest"
	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/loop/looptest"
	"github.com/toolfleet/toolfleet/pkg/model/modelhttp"
	"github.com/toolfleet/toolfleet/pkg/serve"
)

// TestServeParksAndTheLibraryResumes: from the public packages — a served
// run whose model answers HTTP 503 after round 1 parks (its result says
// parked, with the status); a client may not resume it; the operator's
// client.ResumeRun does, once the model is back, and the run ends with the
// calculator called once in all.
func TestServeParksAndTheLibraryResumes(t *testing.T) {
	var down atomic.Bool
	var calcs atomic.Int64
	down.Store(true)
	model := looptest.ModelFunc(func(req loop.Request) (*loop.Response, error) {
		tools := 0
		for _, m := range req.Messages {
			if m.Role == "tool" {
				tools++
			}
		}
		switch {
		case tools == 0:
			return &loop.Response{Message: loop.Message{Role: "assistant", ToolCalls: []loop.ToolCall{
				looptest.Call("c1", "calculator", `{"expression": "6 * 7"}`)}}}, nil
		case down.Load():
			return nil, fmt.Errorf("fake: message failed after 4 attempt(s): %w", &modelhttp.APIError{Provider: "fake", StatusCode: 503})
		default:
			return &loop.Response{Message: loop.Message{Role: "assistant", Content: "42"}}, nil
		}
	})
	calc := harness.Calculator()
	counted := calc
	counted.Run = func(ctx context.Context, args json.RawMessage) (string, error) {
		calcs.Add(1)
		return calc.Run(ctx, args)
	}
	fleet := fleettest.Start(t, fleettest.Config{
		Tools: []harness.Tool{counted},
		Serve: &serve.Config{Name: "parker", Model: model, ShutdownGrace: time.Second, PollWait: 100 * time.Millisecond},
	})
	c, err := client.New(fleet.ConnectClient(), client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	run, err := c.Submit(ctx, client.Request{Prompt: "What is 6 * 7?"})
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Wait(ctx, run)
	if err != nil || !res.Parked() || res.ParkReason != "the model answered fake: HTTP 503 Service Unavailable, after its retries" {
		t.Fatalf("result %+v (%v), want parked naming the status", res, err)
	}

	cctx, ccancel := context.WithTimeout(ctx, 3*time.Second)
	_, err = c.ResumeRun(cctx, run.ID, "mallory", "")
	ccancel()
	if err == nil {
		t.Fatal("a client resumed its run")
	}
	op, err := client.New(fleet.ConnectOperator(), client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := op.ShowRun(ctx, run.ID); err != nil || st.Status != "parked" || st.ParkReason != res.ParkReason {
		t.Fatalf("state %+v (%v), want parked with the result's reason", st, err)
	}
	down.Store(false)
	if _, err := op.ResumeRun(ctx, run.ID, "ops", "the model is back"); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, time.Minute, func() error {
		res, err := c.Wait(ctx, run)
		if err != nil {
			return err
		}
		if res.TerminationReason != string(loop.TerminationNatural) || res.Answer != "42" {
			return fmt.Errorf("result %s %q", res.TerminationReason, res.Answer)
		}
		return nil
	})
	if n := calcs.Load(); n != 1 {
		t.Fatalf("the calculator ran %d times, want once", n)
	}
	if _, err := op.ResumeRun(ctx, run.ID, "ops", ""); !errors.Is(err, client.ErrNotParked) {
		t.Fatalf("resuming a finished run: %v, want ErrNotParked", err)
	}
}
