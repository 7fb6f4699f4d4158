package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/internal/httpapi"
	"github.com/toolfleet/toolfleet/internal/testsync"
	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/serve"
	"github.com/toolfleet/toolfleet/pkg/tool"
)

// holdScript: one call of the gated tool "hold", then the answer.
const holdScript = `{"turns": [
	{"tool_calls": [{"id": "h1", "name": "hold", "arguments": {"a": 1, "b": 2}}]},
	{"content": "held {{result \"h1\"}}"}]}`

// TestCallStartedOnEveryRolesStream: a gated call, once approved,
// starts on the worker and runs until the test lets it finish. The
// operator's, the viewer's and the client's event streams of the run,
// opened while the call waited for approval, each show call_started
// (the call's id and key, its tool, the worker that then answers it)
// while the call runs, before its answer; the stream's live events carry
// no id. With serve.Config.NoCallStarts none shows one.
func TestCallStartedOnEveryRolesStream(t *testing.T) {
	for _, off := range []bool{false, true} {
		t.Run(fmt.Sprintf("NoCallStarts=%v", off), func(t *testing.T) {
			running := make(chan struct{}, 1)
			release := make(chan struct{})
			hold := tool.Must(tool.New(tool.Config{Name: "hold", RequiresApproval: true},
				func(ctx context.Context, _ addArgs) (string, error) {
					running <- struct{}{}
					select {
					case <-release:
						return "done", nil
					case <-ctx.Done():
						return "", ctx.Err()
					}
				}))
			a := startAPIWith(t, httpapi.Config{}, fleetSetup{script: holdScript, tools: []harness.Tool{hold},
				serve: func(c *serve.Config) { c.NoCallStarts = off }})
			cl, op, vw := a.login(t, "client"), a.login(t, "operator"), a.login(t, "viewer")
			var sub httpapi.Submitted
			if st := cl.do("POST", "/v1/runs", nil, map[string]any{"prompt": "hold"}, &sub); st != http.StatusCreated {
				t.Fatalf("submit: %d", st)
			}
			run := string(sub.RunID)
			var l struct {
				Approvals []httpapi.Approval `json:"approvals"`
			}
			testsync.WaitUntil(t, 30*time.Second, "the call waits for approval", func() bool {
				return op.do("GET", "/v1/approvals", nil, nil, &l) == http.StatusOK && len(l.Approvals) == 1
			})
			streams := map[string]<-chan sseEvent{}
			for name, u := range map[string]*user{"operator": op, "viewer": vw, "client": cl} {
				evs, cancel := u.open("/v1/runs/"+run+"/events", "")
				t.Cleanup(cancel)
				streams[name] = evs
			}
			if st := op.do("POST", "/v1/approvals/"+run+"/"+string(l.Approvals[0].CallKey), nil, map[string]string{"decision": "approve"}, nil); st != http.StatusOK {
				t.Fatalf("approve: %d", st)
			}
			select {
			case <-running:
			case <-t.Context().Done():
				t.Fatal("the call never ran")
			}
			// next reads name's stream to its next event of kind, or to
			// its end ("" then).
			next := func(name string, kinds ...string) (seen []sseEvent, last sseEvent) {
				for ev := range streams[name] {
					if ev.err != nil {
						t.Fatalf("%s: event data: %v", name, ev.err)
					}
					seen = append(seen, ev)
					for _, k := range kinds {
						if ev.kind == k {
							return seen, ev
						}
					}
				}
				return seen, sseEvent{}
			}
			starts := map[string]sseEvent{}
			if !off {
				for name := range streams {
					_, ev := next(name, httpapi.EventCallStarted, httpapi.EventAnswered, httpapi.EventFinished)
					if ev.kind != httpapi.EventCallStarted {
						t.Fatalf("%s: %q while the call runs, want %s", name, ev.kind, httpapi.EventCallStarted)
					}
					s := ev.data.CallStarted
					if s == nil || string(s.RunID) != run || s.CallKey != l.Approvals[0].CallKey || s.CallID != "h1" || s.Tool != "hold" || s.Worker == "" || ev.id != "" || ev.data.At.IsZero() {
						t.Fatalf("%s: call_started %s %+v (id %q), want the call h1 of hold on a worker, without an id", name, ev.raw, s, ev.id)
					}
					validate(t, "Event", ev.data)
					starts[name] = ev
				}
			}
			close(release)
			for name := range streams {
				seen, end := next(name, httpapi.EventFinished)
				if end.kind != httpapi.EventFinished || end.data.Answer != "held done" {
					t.Fatalf("%s: the stream ends with %+v, want the run's answer", name, end)
				}
				for _, ev := range seen {
					if ev.kind == httpapi.EventCallStarted {
						t.Fatalf("%s: a second call_started, or one with NoCallStarts (%v): %s", name, off, ev.raw)
					}
					if ev.kind == httpapi.EventAnswered && !off {
						if w := ev.data.Calls[0].Worker; w != starts[name].data.CallStarted.Worker {
							t.Fatalf("%s: answered by %q, started on %q", name, w, starts[name].data.CallStarted.Worker)
						}
					}
				}
			}
		})
	}
}
