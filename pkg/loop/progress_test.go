package loop_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/loop/looptest"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// progressDispatcher is the in-memory fleet, carrying progress as a
// transport does: it takes the sink from Open's context.
type progressDispatcher struct {
	*looptest.Dispatcher
	sink atomic.Pointer[loop.ProgressFunc]
}

func (d *progressDispatcher) Open(ctx context.Context, run protocol.RunID) (loop.Inbox, error) {
	if f := loop.ProgressFrom(ctx); f != nil {
		d.sink.Store(&f)
	}
	return d.Dispatcher.Open(ctx, run)
}

// TestProgressNamesTheCallAndIsASpanEvent: a report reaches the run's sink
// with its call id and tool, becomes an event of the call's span without
// its text, and never reaches the transcript; a report of a call the run
// did not publish is dropped.
func TestProgressNamesTheCallAndIsASpanEvent(t *testing.T) {
	const canary = "canary-progress-41"
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(t.Context()) })
	cfg := fastConfig()
	cfg.TracerProvider = tp
	d := &progressDispatcher{}
	d.Dispatcher = looptest.New(func(ctx context.Context, c protocol.Call) (protocol.Result, bool) {
		if f := d.sink.Load(); f != nil {
			(*f)(protocol.Progress{V: 1, RunID: c.RunID, CallKey: "not-a-call", Seq: 1, Message: "forged"})
			(*f)(protocol.Progress{V: 1, RunID: c.RunID, CallKey: c.CallKey, Seq: 1, Message: canary})
		}
		return looptest.OK("hi"), true
	})
	model := looptest.NewModel(looptest.Calls(looptest.Call("c1", "echo", `{"text":"hi"}`)), looptest.Answer("done"))
	r, err := loop.New(cfg, model, looptest.NewCatalog(specs()...), d, nil)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var got []protocol.Progress
	ctx := loop.WithProgress(t.Context(), func(p protocol.Progress) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, p)
	})
	res, err := r.Run(ctx, "go")
	if err != nil {
		t.Fatal(err)
	}
	d.Wait()
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || got[0].CallID != "c1" || got[0].Tool != "echo" || got[0].Message != canary {
		t.Fatalf("reports %+v, want the one of c1 named c1/echo", got)
	}
	for _, m := range res.Messages {
		if strings.Contains(m.Content, canary) {
			t.Errorf("progress reached the transcript: %+v", m)
		}
	}
	var events int
	for _, s := range exp.GetSpans().Snapshots() {
		for _, ev := range s.Events() {
			if ev.Name == "tool.progress" {
				events++
				if !strings.HasPrefix(s.Name(), "execute_tool") {
					t.Errorf("progress event on span %s", s.Name())
				}
				for _, a := range ev.Attributes {
					if strings.Contains(a.Value.Emit(), canary) {
						t.Errorf("the report's text reached a span: %v", a)
					}
				}
			}
		}
	}
	if events != 1 {
		t.Errorf("%d progress events, want 1", events)
	}
}
