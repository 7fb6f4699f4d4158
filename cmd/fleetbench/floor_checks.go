package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/protocol"
	"github.com/toolfleet/toolfleet/pkg/schema"
)

// The floor with the fleet's checks: the durable floor's transport,
// unchanged, carrying what the fleet's guarantees make every call do, each
// done by the fleet's own package. The requester parses the model's
// arguments, validates them against the tool's schema and canonicalises
// them (as the loop does before it publishes), and sends a strict
// protocol.Call; the worker decodes it strictly and runs it in the harness
// (the arguments validated again, the deadline, panic isolation, bounded
// output, the audit log line) and sends a protocol.Result, which the
// requester decodes strictly. What the fleet spends beyond this row is its
// own transport and bookkeeping; what this row spends beyond the floor is
// the price of the checks.
const floorCheckedHeader = "Bench-Checked"

// floorChecks is the requester's half of the checks: the echo tool's
// schema.
type floorChecks struct {
	schema *schema.Schema
}

func newFloorChecks() (*floorChecks, error) {
	tool := harness.Echo()
	s, err := schema.Compile(string(tool.Name), tool.Parameters)
	if err != nil {
		return nil, err
	}
	return &floorChecks{schema: s}, nil
}

// call validates and canonicalises args and encodes them as run's call
// with key, as the loop and the dispatcher do for a model's tool call.
func (c *floorChecks) call(run protocol.RunID, key protocol.CallKey, args string, deadline time.Time) ([]byte, error) {
	obj, err := schema.ParseObject([]byte(args))
	if err == nil {
		err = c.schema.ValidateObject(obj)
	}
	if err != nil {
		return nil, err
	}
	canonical, err := protocol.CanonicalValue(obj)
	if err != nil {
		return nil, err
	}
	return protocol.Encode(&protocol.Call{V: protocol.Version, RunID: run, Round: 1, CallKey: key,
		CallID: protocol.CallID("call_" + string(key)), Tool: "echo", Arguments: canonical, Deadline: deadline})
}

// result decodes a worker's result strictly: the call key it answers, if
// it is ok.
func (c *floorChecks) result(data []byte) (string, error) {
	res, err := protocol.DecodeResult(data, 0)
	if err != nil {
		return "", err
	}
	if res.Outcome != protocol.OutcomeOK {
		return "", fmt.Errorf("call %s: %s", res.CallKey, res.Outcome)
	}
	return string(res.CallKey), nil
}

// newFloorHarness is a floor worker's harness: the echo tool, logging
// where the fleet's workers log.
func newFloorHarness(log zerolog.Logger) (*harness.Harness, error) {
	return harness.New(harness.Config{Logger: log}, harness.Echo())
}

// errFloorCall is a call the checked worker refused to run.
var errFloorCall = errors.New("floor: call refused")

// runChecked decodes a call strictly, runs it in the harness and encodes
// its result within the message bound, as the fleet's worker does.
func runChecked(ctx context.Context, h *harness.Harness, data []byte) ([]byte, error) {
	call, err := protocol.DecodeCall(data, protocol.DefaultMaxMessageBytes)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errFloorCall, err)
	}
	r := h.Execute(ctx, harness.Call{Tool: call.Tool, Arguments: call.Arguments, Deadline: call.Deadline,
		MaxOutputChars: call.MaxOutputChars, CallKey: call.CallKey})
	res := protocol.Result{V: protocol.Version, RunID: call.RunID, CallKey: call.CallKey,
		Outcome: r.Outcome, Output: r.Output, Truncated: r.Truncated, ErrorType: r.ErrorType,
		DurationMS: r.Duration.Milliseconds()}
	return protocol.EncodeResultWithin(&res, protocol.DefaultMaxMessageBytes)
}
