package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
)

// dbosRun is a DBOS workflow's input: the run's id for the model step's
// stamps, the calls per round and the rounds.
type dbosRun struct {
	ID     string `json:"id"`
	N      int    `json:"n"`
	Rounds int    `json:"rounds"`
}

// dbosAgent is the workflow: a model step, then rounds of N echo steps run
// concurrently (dbos.Go: each step in its own goroutine, checkpointed in the
// system database when it returns), each round ending with the next model
// step. Every step's output is a row in dbos.operation_outputs, written in
// its own transaction; the workflow's input and status are rows in
// dbos.workflow_status.
func dbosAgent(ctx dbos.Context, in dbosRun) (string, error) {
	step := 0
	model := func(context.Context) (string, error) { return recorder.model(in.ID, step, in.N), nil }
	resp, err := dbos.RunAsStep(ctx, model, dbos.WithStepName("model"))
	if err != nil {
		return "", err
	}
	for round := 1; round <= in.Rounds && resp != finalAnswer; round++ {
		outcomes := make([]<-chan dbos.StepOutcome[string], in.N)
		for i := range in.N {
			ch, err := dbos.Go(ctx, func(context.Context) (string, error) { return echoText, nil }, dbos.WithStepName("echo"))
			if err != nil {
				return "", err
			}
			outcomes[i] = ch
		}
		for _, ch := range outcomes {
			o := <-ch
			if o.Err != nil {
				return "", o.Err
			}
			if o.Result != echoText {
				return "", fmt.Errorf("echo returned %d bytes", len(o.Result))
			}
		}
		step = round
		if resp, err = dbos.RunAsStep(ctx, model, dbos.WithStepName("model")); err != nil {
			return "", err
		}
	}
	return "done", nil
}

type dbosPeer struct {
	ctx dbos.Context
}

func newDBOS(ctx context.Context, url string) (peer, error) {
	if url == "" {
		return nil, fmt.Errorf("dbos: --url is required")
	}
	dctx, err := dbos.NewContext(ctx, dbos.Config{
		AppName:     "peersbench",
		DatabaseURL: url,
		Logger:      slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		return nil, fmt.Errorf("dbos: %w", err)
	}
	dbos.RegisterWorkflow(dctx, dbosAgent, dbos.WithWorkflowName("agent"))
	if err := dbos.Launch(dctx); err != nil {
		return nil, fmt.Errorf("dbos: launch: %w", err)
	}
	return &dbosPeer{ctx: dctx}, nil
}

func (p *dbosPeer) run(_ context.Context, id string, n, rounds int) error {
	h, err := dbos.RunWorkflow(p.ctx, dbosAgent, dbosRun{ID: id, N: n, Rounds: rounds}, dbos.WithWorkflowID(id))
	if err != nil {
		return err
	}
	_, err = h.GetResult()
	return err
}

func (p *dbosPeer) close() { dbos.Shutdown(p.ctx, 5*time.Second) }
