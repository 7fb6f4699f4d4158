package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// maxResultBytes bounds a stored result this client decodes.
const maxResultBytes = 64 << 20

// rereadEvery bounds how long Wait goes without reading the result's key
// once more, whatever it hears: a backstop for an announcement lost with
// no reconnect seen.
const rereadEvery = 5 * time.Second

// errNoResult: no result is stored under the key (yet, or any more), or
// there is no runs bucket to hold one.
var errNoResult = errors.New("no result stored")

// Wait waits until run's result is stored and returns it, however long
// before the call it was stored. A run that was refused or failed returns
// its result with a [*RefusedError] or [*FailedError]. It waits until ctx
// ends (or the connection is closed), across coordinator restarts, server
// restarts, reconnects and leader changes.
//
// A parked run's result ([protocol.RunResult.Parked]: its model kept
// failing) is returned too: the run is not over, and waits for an
// operator's [Client.ResumeRun]; its final result later replaces it under
// the same key, announced on the same subject.
//
// It subscribes to the run's announcement ([Run.Subject]) and reads the
// result's key (a direct get, the only JetStream request a client's
// account imports) right after subscribing, after every announcement,
// after every reconnect and at least every 5s: a result stored while the
// subscription was down is read all the same.
func (c *Client) Wait(ctx context.Context, run Run) (*protocol.RunResult, error) {
	// Reconnects first, so that none between the subscription and the
	// first read goes unseen.
	reconnected := c.nc.StatusChanged(nats.CONNECTED)
	defer c.nc.RemoveStatusListener(reconnected)
	announced := make(chan *nats.Msg, 1)
	sub, err := c.nc.ChanSubscribe(run.Subject, announced)
	if err != nil {
		return nil, fmt.Errorf("client: subscribing to the result of run %s: %w", run.ID, err)
	}
	defer sub.Unsubscribe()
	timer := time.NewTimer(0)
	defer timer.Stop()
	var last error
	for {
		select {
		case <-ctx.Done():
			if last == nil {
				last = errNoResult
			}
			return nil, fmt.Errorf("client: waiting for the result of run %s: %w (last: %v)", run.ID, ctx.Err(), last)
		case <-announced:
		case <-reconnected:
		case <-timer.C:
		}
		data, err := c.get(ctx, run.Key)
		switch {
		case err == nil:
			return decodeResult(run, data)
		case errors.Is(err, nats.ErrConnectionClosed):
			return nil, fmt.Errorf("client: waiting for the result of run %s: %w", run.ID, err)
		}
		last = err
		timer.Reset(rereadEvery)
	}
}

// Result returns run's stored result, or [ErrNotFound] when none is
// stored (yet, or any more). A refused or failed run returns its result
// with a [*RefusedError] or [*FailedError].
func (c *Client) Result(ctx context.Context, run Run) (*protocol.RunResult, error) {
	data, err := c.get(ctx, run.Key)
	switch {
	case errors.Is(err, errNoResult):
		return nil, fmt.Errorf("client: run %s: %w", run.ID, ErrNotFound)
	case err != nil:
		return nil, fmt.Errorf("client: reading the result of run %s: %w", run.ID, err)
	}
	return decodeResult(run, data)
}

// get reads the value of key in the runs bucket with a direct get, or
// returns errNoResult.
func (c *Client) get(ctx context.Context, key string) ([]byte, error) {
	api := "$JS.API."
	if c.domain != "" {
		api = "$JS." + c.domain + ".API."
	}
	bucket := c.subjects.RunsBucket()
	actx, cancel := context.WithTimeout(ctx, c.attempt)
	defer cancel()
	m, err := c.nc.RequestWithContext(actx, api+"DIRECT.GET.KV_"+bucket+".$KV."+bucket+"."+key, nil)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return nil, errNoResult // no runs bucket (yet)
	case err != nil:
		return nil, err
	}
	switch {
	case m.Header.Get("Status") == "404":
		return nil, errNoResult
	case m.Header.Get("Status") != "":
		return nil, fmt.Errorf("direct get: status %s %s", m.Header.Get("Status"), m.Header.Get("Description"))
	case m.Header.Get("KV-Operation") != "":
		return nil, errNoResult // deleted or purged
	}
	return m.Data, nil
}

func decodeResult(run Run, data []byte) (*protocol.RunResult, error) {
	res, err := protocol.DecodeRunResult(data, maxResultBytes)
	if err != nil {
		return nil, fmt.Errorf("client: the stored result of run %s: %w", run.ID, err)
	}
	return &res, resultError(&res)
}

// LoopResult returns the loop's result that res carries — the answer, the
// termination reason, the counts, the record of every call and the
// transcript — to read the run's calls by tool_call_id ([loop.Result.Call]:
// outcome, observation, duration, worker). A result stored without its
// transcript (res.TranscriptOmitted) gives calls without observations; a
// refused run, which never started, gives no calls.
func LoopResult(res *protocol.RunResult) (*loop.Result, error) {
	out := &loop.Result{RunID: res.RunID, Answer: res.Answer, TerminationReason: loop.TerminationReason(res.TerminationReason),
		Calls: []loop.CallRecord{}}
	for _, part := range []struct {
		name string
		data json.RawMessage
		into any
	}{{"metadata", res.Metadata, &out.Metadata}, {"calls", res.Calls, &out.Calls}, {"messages", res.Messages, &out.Messages}} {
		if len(part.data) == 0 || string(part.data) == "null" {
			continue
		}
		if err := json.Unmarshal(part.data, part.into); err != nil {
			return nil, fmt.Errorf("client: the %s of run %s's result: %w", part.name, res.RunID, err)
		}
	}
	return out, nil
}
