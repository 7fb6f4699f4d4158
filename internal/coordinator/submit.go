package coordinator

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// ErrNoCoordinator is returned by [Submit] when no coordinator serves the
// submit subject.
var ErrNoCoordinator = errors.New("no coordinator is serving runs")

// Submit sends req on the submit subject of the fleet named by subjects and
// returns the serving coordinator's reply, accepted or refused. Without a
// deadline on ctx it waits up to 5s.
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

// SubmitRawAs is SubmitRaw on client's own submit subject
// ([protocol.Subjects.RunSubmitAs]); "" means the shared one. The result
// is then kept under the response's ResultKey, which only that client
// may read in a deployment that gives each client its own subjects.
func SubmitRawAs(ctx context.Context, nc *nats.Conn, subjects protocol.Subjects, client string, data []byte) (protocol.RunResponse, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, opTimeout)
		defer cancel()
	}
	subject := subjects.RunSubmit()
	if client != "" {
		var err error
		if subject, err = subjects.RunSubmitAs(client); err != nil {
			return protocol.RunResponse{}, fmt.Errorf("coordinator: client: %w", err)
		}
	}
	msg, err := nc.RequestWithContext(ctx, subject, data)
	if errors.Is(err, nats.ErrNoResponders) {
		return protocol.RunResponse{}, fmt.Errorf("coordinator: %s: %w", subject, ErrNoCoordinator)
	}
	if err != nil {
		return protocol.RunResponse{}, fmt.Errorf("coordinator: submitting the run: %w", err)
	}
	resp, err := protocol.DecodeRunResponse(msg.Data, 0)
	if err != nil {
		return protocol.RunResponse{}, fmt.Errorf("coordinator: the reply to the run request: %w", err)
	}
	return resp, nil
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
	results, err := natsbus.OpenRunResults(ctx, js, subjects)
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
