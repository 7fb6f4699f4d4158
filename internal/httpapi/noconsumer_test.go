package httpapi_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/httpapi"
	"github.com/toolfleet/toolfleet/internal/testsync"
)

// consumers is how many consumers each stream of the fleet has, read as
// the fleet's coordinator.
func consumers(t *testing.T, a *api) map[string]int {
	t.Helper()
	js, err := jetstream.New(a.fleet.Conn())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for name := range js.StreamNames(t.Context()).Name() {
		st, err := js.Stream(t.Context(), name)
		if err != nil {
			t.Fatal(err)
		}
		out[name] = st.CachedInfo().State.Consumers
	}
	return out
}

// TestConsoleReadsCreateNoConsumer: every read the console makes for a
// session — the runs, a run with its event stream (to its end, and
// resumed), the approvals, their event stream, the decisions, the tools
// and a tool's history, the agents — as the operator and as the viewer,
// leaves the fleet's streams with exactly the consumers they had: the
// reads are direct gets, stream and consumer information and single gets.
func TestConsoleReadsCreateNoConsumer(t *testing.T) {
	a := startAPI(t, httpapi.Config{PollInterval: 50 * time.Millisecond})
	cl := a.login(t, "client")
	op := a.login(t, "operator")
	vw := a.login(t, "viewer")
	var sub httpapi.Submitted
	if st := cl.do("POST", "/v1/runs", nil, map[string]any{"prompt": "hi"}, &sub); st != http.StatusCreated {
		t.Fatalf("client submit: %d", st)
	}
	run := string(sub.RunID)
	var l struct {
		Approvals []httpapi.Approval `json:"approvals"`
	}
	testsync.WaitUntil(t, 30*time.Second, "the refund waits for approval", func() bool {
		return op.do("GET", "/v1/approvals", nil, nil, &l) == http.StatusOK && len(l.Approvals) == 1
	})
	before := consumers(t, a)

	for _, who := range []*user{op, vw} {
		for _, path := range []string{"/v1/runs", "/v1/runs/" + run, "/v1/approvals", "/v1/approvals/decisions",
			"/v1/tools", "/v1/tools/add/history", "/v1/agents", "/v1/agents/math"} {
			if st := who.do("GET", path, nil, nil, nil); st != http.StatusOK {
				t.Fatalf("GET %s: %d", path, st)
			}
		}
		// the approvals' event stream: the open request
		evs := who.sse("/v1/approvals/events", "", nil, func(ev sseEvent) bool { return ev.kind == httpapi.EventApproval })
		if len(evs) != 1 {
			t.Fatalf("approval events: %+v", evs)
		}
		// the run's events up to its approval request
		evs = who.stream(run, "", func(ev sseEvent) bool { return ev.kind == httpapi.EventApprovalRequested })
		if evs[len(evs)-1].kind != httpapi.EventApprovalRequested {
			t.Fatalf("run events: %+v", evs)
		}
	}
	if after := consumers(t, a); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("consumers before the console's reads %v, after %v", before, after)
	}
	// decided: the run goes on, and the viewer's stream of its events
	// follows it to its end, polling
	ap := l.Approvals[0]
	var evs []sseEvent
	done := make(chan struct{})
	go func() {
		defer close(done)
		evs = vw.stream(run, "", func(ev sseEvent) bool { return ev.kind == httpapi.EventFinished })
	}()
	if st := op.do("POST", "/v1/approvals/"+run+"/"+string(ap.CallKey), nil, map[string]string{"decision": "deny", "reason": "not today"}, nil); st != http.StatusOK {
		t.Fatalf("deny: %d", st)
	}
	<-done
	if len(evs) == 0 || evs[len(evs)-1].kind != httpapi.EventFinished {
		t.Fatalf("the viewer's run events: %+v, want them to the run's end", evs)
	}
	// (the run's coordinator has consumers of its own meanwhile: the
	// journal's are the console's only)
	if after := consumers(t, a)["FLEET_JOURNAL"]; after != before["FLEET_JOURNAL"] {
		t.Fatalf("consumers on the journals before the console's reads %d, after following the run %d", before["FLEET_JOURNAL"], after)
	}
}
