package bustest

import (
	"testing"

	"github.com/toolfleet/toolfleet/internal/natsbus/dispatch"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// OpenRunOf opens an inbox for run on a dispatcher of f.
func (f *Fleet) OpenRunOf(t *testing.T, run protocol.RunID) (*dispatch.Dispatcher, protocol.RunID, loop.Inbox) {
	t.Helper()
	return f.OpenRunWith(t, run, dispatch.DispatcherConfig{})
}

// OpenRunWith opens an inbox for run on a dispatcher of f configured by
// cfg.
func (f *Fleet) OpenRunWith(t *testing.T, run protocol.RunID, cfg dispatch.DispatcherConfig) (*dispatch.Dispatcher, protocol.RunID, loop.Inbox) {
	t.Helper()
	d := f.Dispatcher(cfg)
	t.Cleanup(func() { d.Close() })
	in, err := d.Open(Ctx(t), run)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { in.Close() })
	return d, run, in
}
