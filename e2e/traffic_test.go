package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/internal/natsbus/dispatch"
	"github.com/toolfleet/toolfleet/internal/natstest"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// The kill switch with real processes under the shipped
// deploy/nats-server.conf: while calls flow to two toolworkers,
// "coordinator tools pause work" (as the operator) stops every worker from
// starting the tool's calls — none published after the pause returned
// starts; a worker restarted while paused stays paused; "coordinator tools
// resume" runs every held call, each answered once. How long the workers
// kept starting calls after the pause is logged, not asserted.
func TestToolPauseStopsEveryWorker(t *testing.T) {
	t.Parallel()
	srv := startApprovalServer(t)
	url := srv.ClientURL()
	dir := t.TempDir()
	f := &fleet{t: t, dir: dir, effects: filepath.Join(dir, "effects.log")}
	t.Cleanup(f.killStrayTools)
	manifest := writeJSON(t, dir, "tools.json", map[string]any{"tools": []any{map[string]any{
		"name": toolWork, "description": "records its runs", "parameters": json.RawMessage(sidefxSchema),
		"timeout": "30s", "command": []string{bins.sidefx}, "idempotent": true,
		"env": map[string]string{"SIDEFX_LOG": f.effects},
	}}})
	startWorker := func(name string) *proc {
		p := startProcEnv(t, name, approvalEnv(t, url, "worker"), bins.toolworker,
			"--tools", manifest, "--name", name, "--log-level", "debug")
		p.waitLog(30*time.Second, "worker started")
		return p
	}
	w1 := startWorker("w1")
	startWorker("w2")
	waitForApprovalCatalog(t, url, w1, toolWork)

	nc, js := approvalConn(t, url, "coordinator")
	defer nc.Close()
	subjects := protocol.Subjects{}
	d := dispatch.NewDispatcher(nc, js, subjects, dispatch.DispatcherConfig{})
	run := protocol.NewRunID()
	in, err := d.Open(t.Context(), run)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	results := collectResults(t, in)

	// A steady flow of calls, one every 20ms, until the pause returned.
	var (
		mu        sync.Mutex
		published = map[string]protocol.CallKey{}
		pausedAt  time.Time
		sentAt    = map[string]time.Time{}
	)
	publish := func(id string) {
		t.Helper()
		call := protocol.Call{V: 1, RunID: run, Round: 1, CallKey: protocol.NewCallKey(), CallID: protocol.CallID(id),
			Tool: toolWork, Arguments: json.RawMessage(`{"id":"` + id + `"}`), Deadline: time.Now().Add(2 * time.Minute), Attempt: 1}
		if err := d.Publish(t.Context(), loop.Outgoing{Call: call}); err != nil {
			t.Errorf("Publish %s: %v", id, err)
			return
		}
		mu.Lock()
		published[id], sentAt[id] = call.CallKey, time.Now()
		mu.Unlock()
	}
	stopFlow := make(chan struct{})
	flowDone := make(chan struct{})
	go func() {
		defer close(flowDone)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stopFlow:
				return
			case <-tick.C:
				publish(fmt.Sprintf("flow-%d", i))
			}
		}
	}()
	f.waitStarted("flow-5", 1, 30*time.Second)

	tools(t, url, "pause", toolWork, "--reason", "e2e", "--by", "ann")
	pausedAt = time.Now()
	close(stopFlow)
	<-flowDone
	for i := range 10 {
		publish(fmt.Sprintf("held-%d", i))
	}
	// The held calls wait in the stream while both workers pull.
	waitHeld := func(what string) {
		natstest.WaitFor(t, 30*time.Second, func() error {
			c, err := js.Consumer(t.Context(), subjects.CallsStream(), "tool_"+toolWork)
			if err != nil {
				return err
			}
			info := c.CachedInfo()
			if !info.Paused || info.NumWaiting == 0 || info.NumAckPending != 0 || info.NumPending < 10 {
				return fmt.Errorf("%s: paused %v, waiting pulls %d, ack pending %d, pending %d",
					what, info.Paused, info.NumWaiting, info.NumAckPending, info.NumPending)
			}
			return nil
		})
		for _, r := range f.runs() {
			mu.Lock()
			late := strings.HasPrefix(r.id, "held-") || sentAt[r.id].After(pausedAt)
			mu.Unlock()
			if late {
				t.Fatalf("%s: call %s, published after the pause, started", what, r.id)
			}
		}
	}
	waitHeld("paused")
	var last time.Time
	for _, r := range f.runs() {
		mu.Lock()
		if at := sentAt[r.id]; at.After(last) {
			last = at
		}
		mu.Unlock()
	}
	t.Logf("the last call that started was published %v before the pause returned", pausedAt.Sub(last).Round(time.Millisecond))

	// A worker restarted while paused stays paused.
	w1.stop(15 * time.Second)
	startWorker("w1b")
	waitHeld("after a worker restart")
	tools(t, url, "status", toolWork)

	tools(t, url, "resume", toolWork, "--reason", "e2e done", "--by", "ann")
	mu.Lock()
	want := len(published)
	mu.Unlock()
	got := results.wait(t, want, 60*time.Second)
	mu.Lock()
	defer mu.Unlock()
	for id, key := range published {
		rs := got[key]
		if len(rs) != 1 || rs[0].Outcome != protocol.OutcomeOK {
			t.Errorf("call %s: results %+v, want one ok", id, rs)
		}
		if n := len(f.runsOf(id)); n != 1 {
			t.Errorf("call %s ran %d times", id, n)
		}
	}
}

// tools runs "coordinator tools ARGS" as the operator and fails the test
// unless it succeeds.
func tools(t *testing.T, url string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bins.coordinator, append([]string{"tools"}, args...)...)
	cmd.Env = approvalEnv(t, url, "operator")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("coordinator tools %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// resultSet gathers an inbox's results by call key.
type resultSet struct {
	mu   sync.Mutex
	byID map[protocol.CallKey][]protocol.Result
}

func collectResults(t *testing.T, in loop.Inbox) *resultSet {
	rs := &resultSet{byID: map[protocol.CallKey][]protocol.Result{}}
	go func() {
		for {
			select {
			case ev, ok := <-in.Events():
				if !ok {
					return
				}
				if ev.Result != nil {
					rs.mu.Lock()
					rs.byID[ev.Result.CallKey] = append(rs.byID[ev.Result.CallKey], *ev.Result)
					rs.mu.Unlock()
				}
			case <-t.Context().Done():
				return
			}
		}
	}()
	return rs
}

// wait waits until n calls have a result and returns them all.
func (rs *resultSet) wait(t *testing.T, n int, timeout time.Duration) map[protocol.CallKey][]protocol.Result {
	t.Helper()
	natstest.WaitFor(t, timeout, func() error {
		rs.mu.Lock()
		defer rs.mu.Unlock()
		if len(rs.byID) < n {
			return fmt.Errorf("%d of %d calls answered", len(rs.byID), n)
		}
		return nil
	})
	rs.mu.Lock()
	defer rs.mu.Unlock()
	out := make(map[protocol.CallKey][]protocol.Result, len(rs.byID))
	for k, v := range rs.byID {
		out[k] = append([]protocol.Result(nil), v...)
	}
	return out
}

// The rate limit with real processes: a tool whose manifest limits it to
// 20 calls/s (burst 5), served by three toolworkers, offered up to 200
// calls/s for 4s (the offered rate reached is logged: a loaded machine
// publishes slower). Counted in the tool, the calls that started stay within
// burst + 20/s × the span from the first call published to the last result
// received (the span is measured, so a slow machine loosens the bound but
// never breaks it); every other call is answered rate_limited, with a time
// to try again, and every call is answered exactly once.
func TestRateLimitHoldsAcrossWorkers(t *testing.T) {
	// Not parallel: eight hundred calls and their tool processes keep
	// both cores busy.
	//
	// 4s of offered load: 800 calls, of which about 85 may start (5 +
	// 20/s × 4s) and a limit kept per worker instead of across them would
	// start about three times as many.
	const (
		rate    = 20
		burst   = 5
		perTick = 10 // every 50ms: 200 calls/s
		ticks   = 80
	)
	f := newFleet(t)
	f.manifest = f.writeJSON("limited.json", map[string]any{"tools": []any{map[string]any{
		"name": toolWork, "description": "records its runs", "parameters": json.RawMessage(sidefxSchema),
		"timeout": "30s", "command": []string{bins.sidefx}, "idempotent": true,
		"env":        map[string]string{"SIDEFX_LOG": f.effects},
		"rate_limit": map[string]any{"rate": rate, "burst": burst},
	}}})
	for i := range 3 {
		f.startWorker(fmt.Sprintf("w%d", i+1), "--log-level", "info")
	}
	subjects := protocol.Subjects{}
	d := dispatch.NewDispatcher(f.nc, f.js, subjects, dispatch.DispatcherConfig{})
	run := protocol.NewRunID()
	in, err := d.Open(t.Context(), run)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	results := collectResults(t, in)

	keys := make([]protocol.CallKey, 0, perTick*ticks)
	first := time.Now()
	tick := time.NewTicker(50 * time.Millisecond)
	for i := range ticks {
		<-tick.C
		batch := make([]loop.Outgoing, perTick)
		for j := range batch {
			id := fmt.Sprintf("c%d-%d", i, j)
			batch[j] = loop.Outgoing{Call: protocol.Call{V: 1, RunID: run, Round: 1, CallKey: protocol.NewCallKey(),
				CallID: protocol.CallID(id), Tool: toolWork, Arguments: json.RawMessage(`{"id":"` + id + `"}`),
				Deadline: time.Now().Add(4 * time.Minute), Attempt: 1}}
			keys = append(keys, batch[j].Call.CallKey)
		}
		for j, err := range d.PublishBatch(t.Context(), batch) {
			if err != nil {
				t.Fatalf("Publish %s: %v", batch[j].Call.CallID, err)
			}
		}
	}
	tick.Stop()
	offered := time.Since(first)
	got := results.wait(t, len(keys), 6*time.Minute)
	span := time.Since(first)

	var ok, limited int
	for _, k := range keys {
		rs := got[k]
		if len(rs) != 1 {
			t.Fatalf("call %s: %d results, want 1", k, len(rs))
		}
		switch r := rs[0]; r.Outcome {
		case protocol.OutcomeOK:
			ok++
		case protocol.OutcomeRateLimited:
			limited++
			if r.RetryAfterMS <= 0 {
				t.Errorf("rate_limited result without a time to try again: %+v", r)
			}
		default:
			t.Fatalf("call %s: %+v, want ok or rate_limited", k, r)
		}
	}
	runs := f.runs()
	started := len(runs)
	distinct := map[string]bool{}
	for _, r := range runs {
		distinct[r.id] = true
	}
	bound := burst + int(rate*span.Seconds()) + 1
	t.Logf("%d calls offered in %v (%.0f/s): %d started (bound %d over %v; %d over %ds), %d rate_limited",
		len(keys), offered.Round(time.Millisecond), float64(len(keys))/offered.Seconds(), started, bound,
		span.Round(time.Millisecond), rate*ticks/20+burst, ticks/20, limited)
	// An idempotent call may run twice when the machine is too loaded for
	// its heartbeats (redelivered after the ack wait): each run took its
	// own turn under the limit, so every run counts against the bound.
	if len(distinct) != ok {
		t.Errorf("%d calls recorded by the tool (%d runs), %d ok results", len(distinct), started, ok)
	}
	if started > bound {
		t.Errorf("%d calls started in %v, more than the limit allows (%d)", started, span, bound)
	}
	if limited == 0 {
		t.Error("no call was rate limited")
	}
}
