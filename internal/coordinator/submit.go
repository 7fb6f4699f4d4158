package coordinator

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/pkg/client"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// Submit stores req in the runs stream as a submission of the default
// client ([client.DefaultClient]) and returns where its result will be. It
// retries until the server stores it; without a deadline on ctx it tries
// for up to 30s.
func Submit(ctx context.Context, nc *nats.Conn, subjects protocol.Subjects, req protocol.RunRequest) (protocol.RunResponse, error) {
	data, err := protocol.Encode(&req)
	if err != nil {
		return protocol.RunResponse{}, fmt.Errorf("coordinator: encoding the run request: %w", err)
	}
	return SubmitRaw(ctx, nc, subjects, data)
}

// SubmitRaw is [Submit] with the request already encoded, as "nats req"
// sends it.
func SubmitRaw(ctx context.Context, nc *nats.Conn, subjects protocol.Subjects, data []byte) (protocol.RunResponse, error) {
	return SubmitRawAs(ctx, nc, subjects, "", data)
}

// SubmitRawAs is SubmitRaw as client ("": [client.DefaultClient]) on the
// default agent, with a fresh submission id. The response is built from the
// server's acknowledgement: it is always "accepted", and a request the
// coordinator refuses gets a stored result saying why.
func SubmitRawAs(ctx context.Context, nc *nats.Conn, subjects protocol.Subjects, name string, data []byte) (protocol.RunResponse, error) {
	if name == "" {
		name = client.DefaultClient
	}
	c, err := client.New(nc, client.Config{Prefix: subjects.Prefix, Client: name})
	if err != nil {
		return protocol.RunResponse{}, fmt.Errorf("coordinator: %w", err)
	}
	run, err := c.SubmitRaw(ctx, "", "", data)
	if err != nil {
		return protocol.RunResponse{}, fmt.Errorf("coordinator: %w", err)
	}
	return protocol.RunResponse{
		V: protocol.Version, Status: protocol.RunAccepted, RunID: run.ID,
		ResultSubject: run.Subject, ResultBucket: subjects.RunsBucket(), ResultKey: run.Key,
	}, nil
}

// WaitResult waits until the result under key (a run id, or
// [protocol.RunKey] of a client's run: a RunResponse's ResultKey) is in
// the runs bucket and returns it decoded and as stored. It sees a result
// stored before it was called as well as one stored later, and waits until
// ctx ends.
func WaitResult(ctx context.Context, js natsbus.JetStream, subjects protocol.Subjects, key string) (protocol.RunResult, []byte, error) {
	run := key
	if client, r, ok := strings.Cut(key, "."); ok {
		if !protocol.ValidToken(client) {
			return protocol.RunResult{}, nil, fmt.Errorf("coordinator: result key %q is not valid", key)
		}
		run = r
	}
	if !protocol.ValidToken(run) {
		return protocol.RunResult{}, nil, fmt.Errorf("coordinator: run id %q is not valid", run)
	}
	// The bucket may not exist yet: a submission is stored before any
	// coordinator has started (and made it).
	var results *natsbus.RunResults
	var err error
	for attempt := 1; ; attempt++ {
		if results, err = natsbus.OpenRunResults(ctx, js, subjects); !errors.Is(err, natsbus.ErrNoRunsBucket) {
			break
		}
		select {
		case <-ctx.Done():
			return protocol.RunResult{}, nil, fmt.Errorf("coordinator: bucket %s: %w", subjects.RunsBucket(), err)
		case <-time.After(min(time.Duration(attempt)*50*time.Millisecond, time.Second)):
		}
	}
	if err != nil {
		return protocol.RunResult{}, nil, fmt.Errorf("coordinator: bucket %s: %w", subjects.RunsBucket(), err)
	}
	data, err := results.Wait(ctx, key)
	switch {
	case err == nil:
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
		return protocol.RunResult{}, nil, fmt.Errorf("coordinator: waiting for the result of run %s: %w", run, ctx.Err())
	case errors.Is(err, natsbus.ErrWatchEnded):
		return protocol.RunResult{}, nil, fmt.Errorf("coordinator: the watch of run %s ended", run)
	default:
		return protocol.RunResult{}, nil, fmt.Errorf("coordinator: watching run %s: %w", run, err)
	}
	res, err := protocol.DecodeRunResult(data, 64<<20)
	if err != nil {
		return protocol.RunResult{}, nil, fmt.Errorf("coordinator: the stored result of run %s: %w", run, err)
	}
	return res, data, nil
}
