package workerbus

import (
	"context"
	"testing"

	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// BenchmarkRunningCall is what the worker keeps for one call while its
// tool runs, set up and taken down: its cancel, reachable by cancel
// messages, and its progress sink.
func BenchmarkRunningCall(b *testing.B) {
	w := &Worker{running: make(map[callRef]runningCall)}
	call := protocol.Call{V: protocol.Version, RunID: protocol.NewRunID(), CallKey: protocol.NewCallKey(), Tool: "echo"}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		cctx, cancel := context.WithCancelCause(ctx)
		reg := w.register(call.RunID, call.CallKey, cancel)
		_, progress := w.withProgress(cctx, call)
		progress.end()
		w.unregister(reg)
		cancel(nil)
	}
}
