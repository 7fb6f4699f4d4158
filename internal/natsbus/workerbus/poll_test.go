package workerbus_test

import (
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/internal/natsbus/bustest"
	"github.com/toolfleet/toolfleet/internal/natsbus/workerbus"
	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/harness/harnesstest"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// TestPollsDropNoCallOnASlowLink: a worker whose link to the server is
// slow (20ms each way, more than a tenth of its poll) still takes every
// call on its first delivery. A poll that ended in the client while the
// server could still deliver to it would drop the calls the server sent in
// its last moments, and the server would send them again only after the
// ack wait.
func TestPollsDropNoCallOnASlowLink(t *testing.T) {
	f := bustest.NewFleet(t)
	h := harnesstest.New(t, harness.Config{}, harness.Echo())
	// A long ack wait: a dropped call comes back only after the test.
	f.StartWorkerOn(t, newLink(t, f.Srv.ClientURL(), 20*time.Millisecond).connect(t), h,
		workerbus.WorkerConfig{Name: "far", Concurrency: 1, PollWait: 100 * time.Millisecond, AckWait: time.Minute})

	// Calls published one at a time, each a little later in a poll than
	// the last, so some reach the server as a poll ends.
	d, run, in := f.OpenRun(t)
	const n = 40
	for i := range n {
		call := bustest.NewCall(run, "echo", `{"text":"e"}`, 30*time.Second)
		if err := d.Publish(bustest.Ctx(t), loop.Outgoing{Call: call}); err != nil {
			t.Fatal(err)
		}
		r, ok := awaitResult(in, call.CallKey, 10*time.Second)
		if !ok {
			t.Fatalf("call %d was not answered: a poll dropped it", i)
		}
		if r.Outcome != protocol.OutcomeOK {
			t.Fatalf("call %d: %+v", i, r)
		}
		pause(time.Duration(i) * 7 * time.Millisecond % (150 * time.Millisecond))
	}
	if info := f.ConsumerInfo(t, "echo"); info.Delivered.Consumer != n || info.NumAckPending != 0 {
		t.Fatalf("%d deliveries of %d calls, %d unacknowledged; want one each, all acknowledged",
			info.Delivered.Consumer, n, info.NumAckPending)
	}
}

// awaitResult reads in until key's result arrives, or reports false after
// within.
func awaitResult(in loop.Inbox, key protocol.CallKey, within time.Duration) (protocol.Result, bool) {
	timer := time.NewTimer(within)
	defer timer.Stop()
	for {
		select {
		case ev, ok := <-in.Events():
			if !ok {
				return protocol.Result{}, false
			}
			if ev.Result != nil && ev.Result.CallKey == key {
				return *ev.Result, true
			}
		case <-timer.C:
			return protocol.Result{}, false
		}
	}
}

// pause spaces out what a test sends; it synchronises nothing.
func pause(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	<-t.C
}
