package stores_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natsbus/bustest"
	"github.com/toolfleet/toolfleet/internal/natsbus/workerbus"
	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/harness/harnesstest"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// TestOwnRecordStreams: a tool with record streams of its own
// (StreamConfig.OwnRecordTools) has its worker's claims and its
// coordinator's withdrawals stored there, with no TTL, and nothing in the
// shared starts stream; a tool without keeps using the shared one.
func TestOwnRecordStreams(t *testing.T) {
	f := bustest.NewFleet(t)
	if _, err := natsbus.Provision(bustest.Ctx(t), f.JS, f.Subjects, natsbus.StreamConfig{OwnRecordTools: []string{"charge"}}); err != nil {
		t.Fatalf("Provision: %v", err)
	}
	msgs := func(stream string) uint64 {
		t.Helper()
		st, err := f.JS.Stream(bustest.Ctx(t), stream)
		if err != nil {
			t.Fatalf("stream %s: %v", stream, err)
		}
		return st.CachedInfo().State.Msgs
	}
	own, shared := f.Subjects.OwnStartsStream("charge"), f.Subjects.StartsStream()
	d, run, in := f.OpenRun(t)

	// The coordinator's withdrawal of a call no worker took.
	withdrawn := bustest.NewCall(run, "charge", `{}`, 30*time.Second)
	if err := d.Publish(bustest.Ctx(t), loop.Outgoing{Call: withdrawn, AtMostOnce: true}); err != nil {
		t.Fatal(err)
	}
	if ok, err := bustest.Withdrawer(t, in).Withdraw(bustest.Ctx(t), withdrawn.CallKey); !ok || err != nil {
		t.Fatalf("Withdraw = %v, %v; want true, nil", ok, err)
	}
	if n, m := msgs(own), msgs(shared); n != 1 || m != 0 {
		t.Fatalf("after the withdrawal: %s holds %d, %s %d; want 1, 0", own, n, shared, m)
	}

	// A worker's claim of the next call, and of a call of a tool without
	// streams of its own.
	var runs atomic.Int64
	f.StartWorker(t, harnesstest.New(t, harness.Config{}, bustest.Counting("charge", &runs, 0, false), bustest.Counting("refund", &runs, 0, false)), workerbus.WorkerConfig{Name: "w1"})
	for _, tool := range []protocol.ToolName{"charge", "refund"} {
		call := bustest.NewCall(run, tool, `{}`, 30*time.Second)
		if err := d.Publish(bustest.Ctx(t), loop.Outgoing{Call: call, AtMostOnce: true}); err != nil {
			t.Fatal(err)
		}
		if r := bustest.NextResult(t, in, call.CallKey, 15*time.Second); r.Outcome != protocol.OutcomeOK {
			t.Fatalf("%s: %+v, want ok", tool, r)
		}
	}
	if n, m := msgs(own), msgs(shared); n != 2 || m != 1 || runs.Load() != 2 {
		t.Fatalf("after the claims: %s holds %d, %s %d, %d runs; want 2, 1, 2", own, n, shared, m, runs.Load())
	}
	st, err := f.JS.Stream(bustest.Ctx(t), own)
	if err != nil {
		t.Fatal(err)
	}
	if st.CachedInfo().Config.AllowMsgTTL {
		t.Errorf("%s takes per-message TTLs", own)
	}
}
