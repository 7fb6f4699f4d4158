package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

const temporalQueue = "peersbench"

// temporalAgent is the workflow: a model activity, then rounds of N echo
// activities started together and awaited, each round ending with the next
// model activity. Activities have the SDK's default retry policy (retried
// until they succeed) and a start-to-close timeout.
func temporalAgent(ctx workflow.Context, id string, n, rounds int) (string, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute})
	var resp string
	if err := workflow.ExecuteActivity(ctx, "model", id, 0, n).Get(ctx, &resp); err != nil {
		return "", err
	}
	for round := 1; round <= rounds && resp != finalAnswer; round++ {
		futures := make([]workflow.Future, n)
		for i := range n {
			futures[i] = workflow.ExecuteActivity(ctx, "echo", echoText)
		}
		for _, f := range futures {
			var out string
			if err := f.Get(ctx, &out); err != nil {
				return "", err
			}
			if out != echoText {
				return "", fmt.Errorf("echo returned %d bytes", len(out))
			}
		}
		if err := workflow.ExecuteActivity(ctx, "model", id, round, n).Get(ctx, &resp); err != nil {
			return "", err
		}
	}
	return "done", nil
}

func temporalModel(_ context.Context, id string, step, n int) (string, error) {
	return recorder.model(id, step, n), nil
}

func temporalEcho(_ context.Context, text string) (string, error) { return text, nil }

type temporalPeer struct {
	c client.Client
	w worker.Worker
}

func newTemporal(_ context.Context, address string) (peer, error) {
	c, err := client.Dial(client.Options{
		HostPort:  address,
		Namespace: "default",
		Logger:    tlog.NewStructuredLogger(slog.New(slog.NewTextHandler(io.Discard, nil))),
	})
	if err != nil {
		return nil, fmt.Errorf("temporal: dial %s: %w", address, err)
	}
	// The worker's defaults (pollers, slots, sticky cache) are left as they are.
	w := worker.New(c, temporalQueue, worker.Options{})
	w.RegisterWorkflowWithOptions(temporalAgent, workflow.RegisterOptions{Name: "agent"})
	w.RegisterActivityWithOptions(temporalModel, activity.RegisterOptions{Name: "model"})
	w.RegisterActivityWithOptions(temporalEcho, activity.RegisterOptions{Name: "echo"})
	if err := w.Start(); err != nil {
		c.Close()
		return nil, fmt.Errorf("temporal: start worker: %w", err)
	}
	return &temporalPeer{c: c, w: w}, nil
}

func (p *temporalPeer) run(ctx context.Context, id string, n, rounds int) error {
	r, err := p.c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: temporalQueue}, "agent", id, n, rounds)
	if err != nil {
		return err
	}
	var out string
	return r.Get(ctx, &out)
}

func (p *temporalPeer) close() {
	p.w.Stop()
	p.c.Close()
}
