package coordinator

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natsbus/stores"
	"github.com/toolfleet/toolfleet/pkg/client"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// SubmitRaw stores a run request, already encoded as "nats req" sends it,
// in the runs stream as a submission of the default client
// ([client.DefaultClient]) and returns where its result will be
// ([SubmitRawAs]).
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
// ctx ends, across node losses, reconnects and leader changes: it waits as
// [client.Client.Wait] does, then reads the stored bytes.
func WaitResult(ctx context.Context, js natsbus.JetStream, subjects protocol.Subjects, key string) (protocol.RunResult, []byte, error) {
	name, run, ok := strings.Cut(key, ".")
	if !ok {
		name, run = client.DefaultClient, key
	}
	if !protocol.ValidToken(name) {
		return protocol.RunResult{}, nil, fmt.Errorf("coordinator: result key %q is not valid", key)
	}
	if !protocol.ValidToken(run) {
		return protocol.RunResult{}, nil, fmt.Errorf("coordinator: run id %q is not valid", run)
	}
	c, err := client.New(js.Conn(), client.Config{Prefix: subjects.Prefix, Client: name})
	if err != nil {
		return protocol.RunResult{}, nil, fmt.Errorf("coordinator: %w", err)
	}
	subject, _ := subjects.ClientRunResult(name, protocol.RunID(run))
	var refused *client.RefusedError
	var failed *client.FailedError
	_, err = c.Wait(ctx, client.Run{ID: protocol.RunID(run), Key: key, Subject: subject})
	if err != nil && !errors.As(err, &refused) && !errors.As(err, &failed) {
		return protocol.RunResult{}, nil, fmt.Errorf("coordinator: %w", err)
	}
	// A run's result is stored once: read it again as stored, asking
	// again while the cluster does not answer.
	var data []byte
	for attempt := 1; ; attempt++ {
		if data, err = readResult(ctx, js, subjects, key); err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return protocol.RunResult{}, nil, fmt.Errorf("coordinator: reading the result of run %s: %w", run, err)
		case <-time.After(min(time.Duration(attempt)*50*time.Millisecond, time.Second)):
		}
	}
	res, err := protocol.DecodeRunResult(data, 64<<20)
	if err != nil {
		return protocol.RunResult{}, nil, fmt.Errorf("coordinator: the stored result of run %s: %w", run, err)
	}
	return res, data, nil
}

// readResult reads the result under key as stored.
func readResult(ctx context.Context, js natsbus.JetStream, subjects protocol.Subjects, key string) ([]byte, error) {
	results, err := stores.OpenRunResults(ctx, js, subjects)
	if err != nil {
		return nil, err
	}
	data, _, err := results.Entry(ctx, key)
	return data, err
}
