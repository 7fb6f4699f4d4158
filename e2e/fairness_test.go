package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/internal/natsbus/admission"
	"github.com/toolfleet/toolfleet/internal/natsbus/dispatch"
	"github.com/toolfleet/toolfleet/internal/natstest"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// Fair shares with real processes under the shipped
// deploy/nats-server.conf: the admin sets each client's share of a tool to
// 16 with "coordinator provision --max-calls-per-client 16"; one client
// submits 500 calls of the tool at once while another sends one call at a
// time. Counted in the tool (its start order), a light call never starts
// after more than share + the worker's concurrency of the flooder's calls
// that were published before it — not after the flooder's backlog — and
// every call id is answered exactly once. The light client's p99 wait
// (published → started notice), alone and under the flood, is logged, not
// asserted.
func TestClientShareWithRealWorkers(t *testing.T) {
	t.Parallel()
	const (
		share       = 16
		concurrency = 4
		flood       = 500
		lightAlone  = 6
		lightLoaded = 12
		interval    = 250 * time.Millisecond
	)
	srv := startApprovalServer(t)
	url := srv.ClientURL()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	cmd := exec.CommandContext(ctx, bins.coordinator, "provision", "--nats-url", url, "--max-calls-per-client", fmt.Sprint(share))
	cmd.Env = approvalEnv(t, url, "admin")
	out, err := cmd.CombinedOutput()
	cancel()
	if err != nil {
		t.Fatalf("coordinator provision --max-calls-per-client: %v\n%s", err, out)
	}
	dir := t.TempDir()
	f := &fleet{t: t, dir: dir, effects: filepath.Join(dir, "effects.log")}
	t.Cleanup(f.killStrayTools)
	manifest := writeJSON(t, dir, "tools.json", map[string]any{"tools": []any{map[string]any{
		"name": toolWork, "description": "records its runs", "parameters": json.RawMessage(sidefxSchema),
		"timeout": "30s", "command": []string{bins.sidefx}, "idempotent": true,
		"env": map[string]string{"SIDEFX_LOG": f.effects},
	}}})
	w := startProcEnv(t, "w1", approvalEnv(t, url, "worker"), bins.toolworker,
		"--tools", manifest, "--name", "w1", "--concurrency", fmt.Sprint(concurrency))
	w.waitLog(30*time.Second, "worker started")
	waitForApprovalCatalog(t, url, w, toolWork)

	nc, js := approvalConn(t, url, "coordinator")
	defer nc.Close()
	d := dispatch.NewDispatcher(nc, js, protocol.Subjects{}, dispatch.DispatcherConfig{})
	defer d.Close()
	open := func(client string) (protocol.RunID, *shareEvents) {
		run := protocol.NewRunID()
		forget, err := d.Route(run, admission.Route{Client: client})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(forget)
		in, err := d.Open(t.Context(), run)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { in.Close() })
		return run, watchShareEvents(t, in)
	}
	runF, evF := open("flooder")
	runL, evL := open("light")
	call := func(run protocol.RunID, id string) protocol.Call {
		return protocol.Call{V: 1, RunID: run, Round: 1, CallKey: protocol.NewCallKey(), CallID: protocol.CallID(id),
			Tool: toolWork, Arguments: json.RawMessage(`{"id":"` + id + `","sleep_ms":20}`), Deadline: time.Now().Add(2 * time.Minute), Attempt: 1}
	}
	type lightCall struct {
		id, key   string
		before    int // tool starts recorded before it was published
		published time.Time
	}
	var lights []lightCall
	sendLight := func(n int) []time.Duration {
		var waits []time.Duration
		for i := range n {
			c := call(runL, fmt.Sprintf("light-%d", len(lights)))
			lc := lightCall{id: string(c.CallID), key: string(c.CallKey), before: len(f.runs()), published: time.Now()}
			if err := d.Publish(t.Context(), loop.Outgoing{Call: c, StartedNotices: true}); err != nil {
				t.Fatalf("light call: %v", err)
			}
			lights = append(lights, lc)
			waits = append(waits, evL.waitStarted(t, c.CallKey, 60*time.Second).Sub(lc.published))
			if i < n-1 {
				time.Sleep(interval) // the light client's pace, not synchronisation
			}
		}
		return waits
	}
	alone := sendLight(lightAlone)

	var batch []loop.Outgoing
	for i := range flood {
		batch = append(batch, loop.Outgoing{Call: call(runF, fmt.Sprintf("flood-%d", i))})
	}
	for i, err := range d.PublishBatch(t.Context(), batch) {
		if err != nil {
			t.Fatalf("flood call %d: %v", i, err)
		}
	}
	loaded := sendLight(lightLoaded)

	evF.waitResults(t, flood, 3*time.Minute)
	evL.waitResults(t, lightAlone+lightLoaded, time.Minute)
	for _, ev := range []*shareEvents{evF, evL} {
		ev.mu.Lock()
		for k, rs := range ev.results {
			if len(rs) != 1 || rs[0].Outcome != protocol.OutcomeOK {
				t.Errorf("call %s answered %d times (%v), want once ok", k, len(rs), rs)
			}
		}
		ev.mu.Unlock()
	}
	runs := f.runs()
	at := map[string]int{}
	for i, r := range runs {
		if _, ok := at[r.id]; ok {
			t.Errorf("call %s started twice", r.id)
		}
		at[r.id] = i
	}
	worst := 0
	for _, lc := range lights[lightAlone:] {
		ahead := 0
		for _, r := range runs[lc.before:at[lc.id]] {
			if strings.HasPrefix(r.id, "flood-") {
				ahead++
			}
		}
		worst = max(worst, ahead)
	}
	if worst > share+concurrency {
		t.Fatalf("a light call started after %d of the flooder's calls, want at most share %d + concurrency %d", worst, share, concurrency)
	}
	t.Logf("light client p99 wait (published -> started notice): alone %v (%d calls), under a flood of %d calls %v (%d calls); most flooder calls started ahead of a light call: %d (bound %d)",
		pct99(alone), len(alone), flood, pct99(loaded), len(loaded), worst, share+concurrency)
}

func pct99(waits []time.Duration) time.Duration {
	s := slices.Clone(waits)
	slices.Sort(s)
	return s[min(len(s)-1, (len(s)*99+99)/100-1)]
}

// shareEvents are one run's results and started notices.
type shareEvents struct {
	mu      sync.Mutex
	results map[protocol.CallKey][]protocol.Result
	started map[protocol.CallKey]time.Time
}

func watchShareEvents(t *testing.T, in loop.Inbox) *shareEvents {
	e := &shareEvents{results: map[protocol.CallKey][]protocol.Result{}, started: map[protocol.CallKey]time.Time{}}
	go func() {
		for ev := range in.Events() {
			now := time.Now()
			e.mu.Lock()
			switch {
			case ev.Result != nil:
				e.results[ev.Result.CallKey] = append(e.results[ev.Result.CallKey], *ev.Result)
			case ev.Started != nil:
				if _, ok := e.started[ev.Started.CallKey]; !ok {
					e.started[ev.Started.CallKey] = now
				}
			}
			e.mu.Unlock()
		}
	}()
	return e
}

func (e *shareEvents) waitStarted(t *testing.T, key protocol.CallKey, within time.Duration) time.Time {
	t.Helper()
	var at time.Time
	natstest.WaitFor(t, within, func() error {
		e.mu.Lock()
		defer e.mu.Unlock()
		var ok bool
		if at, ok = e.started[key]; !ok {
			return fmt.Errorf("call %s not started", key)
		}
		return nil
	})
	return at
}

func (e *shareEvents) waitResults(t *testing.T, n int, within time.Duration) {
	t.Helper()
	natstest.WaitFor(t, within, func() error {
		e.mu.Lock()
		defer e.mu.Unlock()
		if len(e.results) < n {
			return fmt.Errorf("%d of %d calls answered", len(e.results), n)
		}
		return nil
	})
}
