package loop

import (
	"context"
	"errors"
	"testing"

	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// TestWorkerOutcomesAnswered holds the loop to protocol's outcome table:
// a result with any outcome a worker may report answers its call with
// that outcome and an observation of its own, so an outcome added to the
// table without its case in fromResult fails here instead of being
// answered as something else.
func TestWorkerOutcomesAnswered(t *testing.T) {
	r, err := New(Config{}, nopModel{}, nopCatalog{}, nopDispatcher{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ru := r.newRun(nil, "run1")
	texts := map[string]protocol.Outcome{}
	for _, o := range protocol.Outcomes {
		if !o.ByWorker() {
			continue
		}
		c := &roundCall{name: "echo", tool: "echo", entry: &toolEntry{spec: protocol.ToolSpec{Name: "echo"}}}
		ru.fromResult(c, protocol.Result{Outcome: o, Output: "out of " + string(o)})
		if !c.done || c.ans.Outcome != o {
			t.Errorf("result %q: answered %q (done %v), want %q", o, c.ans.Outcome, c.done, o)
			continue
		}
		if prev, dup := texts[c.ans.Content]; dup {
			t.Errorf("results %q and %q: the same observation %q", prev, o, c.ans.Content)
		}
		texts[c.ans.Content] = o
	}
}

type nopModel struct{}

func (nopModel) Complete(context.Context, Request) (*Response, error) { return nil, errors.New("nop") }

type nopCatalog struct{}

func (nopCatalog) Tools(context.Context) ([]protocol.ToolSpec, error) { return nil, nil }

type nopDispatcher struct{}

func (nopDispatcher) Open(context.Context, protocol.RunID) (Inbox, error) {
	return nil, errors.New("nop")
}
func (nopDispatcher) Publish(context.Context, Outgoing) error       { return errors.New("nop") }
func (nopDispatcher) Cancel(context.Context, protocol.Cancel) error { return nil }
