package looptest_test

import (
	"testing"

	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/loop/dispatchertest"
	"github.com/toolfleet/toolfleet/pkg/loop/looptest"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// TestDispatcherConformance holds the in-memory Dispatcher to the
// loop.Dispatcher contract the NATS one is held to.
func TestDispatcherConformance(t *testing.T) {
	dispatchertest.Run(t, func(t *testing.T, h dispatchertest.Handler) dispatchertest.Fleet {
		d := looptest.New(h)
		d.InboxSize = 8
		t.Cleanup(d.Wait)
		return dispatchertest.Fleet{
			Dispatcher: d,
			InboxSize:  d.InboxSize,
			Send: func(t testing.TB, _ protocol.ToolName, r protocol.Result) {
				d.Inject(r.RunID, loop.Event{Result: &r})
			},
		}
	})
}
