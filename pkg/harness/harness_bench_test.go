package harness_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// benchHarness serves the built-in tools and logs at info level, as the
// commands do, to a writer that discards.
func benchHarness(b *testing.B) *harness.Harness {
	b.Helper()
	h, err := harness.New(harness.Config{Logger: zerolog.New(discard{}).Level(zerolog.InfoLevel)},
		harness.Echo(), harness.Calculator())
	if err != nil {
		b.Fatal(err)
	}
	return h
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

func BenchmarkExecute(b *testing.B) {
	for _, bc := range []struct {
		name, tool, args string
		want             protocol.Outcome
	}{
		{"echo/ok", "echo", `{"text":"` + strings.Repeat("x", 128) + `"}`, protocol.OutcomeOK},
		{"echo/invalid-arguments", "echo", `{"text":42}`, protocol.OutcomeInvalidArguments},
		{"calculator/ok", "calculator", `{"expression":"(17 + 25) * 3 - 2 ** 10 / 4"}`, protocol.OutcomeOK},
		{"calculator/failed", "calculator", `{"expression":"1 / 0"}`, protocol.OutcomeFailed},
		{"unknown-tool", "nope", `{}`, protocol.OutcomeUnknownTool},
	} {
		b.Run(bc.name, func(b *testing.B) {
			h := benchHarness(b)
			call := harness.Call{Tool: protocol.ToolName(bc.tool), Arguments: []byte(bc.args), MaxOutputChars: 12000}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if res := h.Execute(ctx, call); res.Outcome != bc.want {
					b.Fatalf("outcome %q, want %q", res.Outcome, bc.want)
				}
			}
		})
	}
}

// BenchmarkWorkerCall is the per-call check path of a worker, with no
// transport: the strict decode of a call as the worker receives it, its
// run in the harness (the echo tool's arguments validated against its
// schema, the deadline, panic isolation, bounded output) and the encode
// of its result within the message bound. Every allocation here is one
// per call in the fleet.
func BenchmarkWorkerCall(b *testing.B) {
	h, data := benchHarness(b), benchCallData(b)
	b.ReportAllocs()
	for b.Loop() {
		if err := workerCall(h, data); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkWorkerCallParallel is BenchmarkWorkerCall with 16 calls at a
// time, a worker's default slots.
func BenchmarkWorkerCallParallel(b *testing.B) {
	h, data := benchHarness(b), benchCallData(b)
	b.SetParallelism(max(16/runtime.GOMAXPROCS(0), 1))
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := workerCall(h, data); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// benchCallData is an echo call of 128 bytes of text, as a coordinator
// publishes it.
func benchCallData(b *testing.B) []byte {
	b.Helper()
	data, err := protocol.Encode(&protocol.Call{V: protocol.Version, RunID: protocol.NewRunID(), Round: 1,
		CallKey: protocol.NewCallKey(), CallID: "call_abc123", Tool: "echo",
		Arguments: []byte(`{"text":"` + strings.Repeat("x", 128) + `"}`),
		Deadline:  time.Now().Add(time.Hour), MaxOutputChars: protocol.DefaultMaxObservationChars})
	if err != nil {
		b.Fatal(err)
	}
	return data
}

// workerCall decodes data as a worker does, runs the call in h and
// encodes its result.
func workerCall(h *harness.Harness, data []byte) error {
	call, err := protocol.DecodeCall(data, protocol.DefaultMaxMessageBytes)
	if err != nil {
		return err
	}
	res := h.ExecuteUnlogged(context.Background(), harness.Call{Tool: call.Tool, Arguments: call.Arguments,
		Deadline: call.Deadline, MaxOutputChars: call.MaxOutputChars, CallKey: call.CallKey})
	if res.Outcome != protocol.OutcomeOK {
		return fmt.Errorf("outcome %q, want ok", res.Outcome)
	}
	r := protocol.Result{V: protocol.Version, RunID: call.RunID, CallKey: call.CallKey,
		Outcome: res.Outcome, Output: res.Output, Truncated: res.Truncated, ErrorType: res.ErrorType,
		DurationMS: res.Duration.Milliseconds(), Worker: "worker-1", Attempt: 1}
	_, err = protocol.EncodeResultWithin(&r, protocol.DefaultMaxMessageBytes)
	return err
}
