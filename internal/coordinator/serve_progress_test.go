package coordinator_test

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolfleet/toolfleet/internal/coordinator"
	"github.com/toolfleet/toolfleet/internal/natsbus/workerbus"
	"github.com/toolfleet/toolfleet/internal/natstest"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// floodThenAnswer calls the flood tool, then answers with its result.
const floodThenAnswer = `{"turns": [
  {"tool_calls": [{"id": "f", "name": "flood", "arguments": {}}]},
  {"content": "flood said {{result \"f\"}}"}
]}`

// TestServeProgressFlood runs an exec tool that reports its progress
// 100,000 times as fast as it can write (well under a second), twice, for a
// client of the run service: the client sees a bounded stream of its own
// run's progress — at most the worker's rate over the call's duration, the
// last report included — the call's result is unchanged, and the process
// (coordinator and worker both) holds no more memory after the second run
// than after the first.
func TestServeProgressFlood(t *testing.T) {
	f := newServeFleet(t)
	tools := filepath.Join(t.TempDir(), "tools.json")
	manifest := `{"tools": [{"name": "flood", "description": "floods its progress", "parameters": {"type": "object"},
	  "timeout": "60s", "command": ["sh", "-c", "cat >/dev/null; awk 'BEGIN { for (i = 0; i < 100000; i++) print \"step \" i }' >&3; echo result"]}]}`
	if err := os.WriteFile(tools, []byte(manifest), 0o600); err != nil {
		t.Fatal(err)
	}
	f.start(serveOpts{script: floodThenAnswer, toolsFile: tools})

	run := func() (heap uint64) {
		progress := make(chan *nats.Msg, 100000)
		sub, err := f.nc.ChanSubscribe("fleet.run.progress.>", progress)
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Unsubscribe()
		var resp protocol.RunResponse
		natstest.WaitFor(t, 10*time.Second, func() error {
			var err error
			resp, err = coordinator.SubmitRawAs(t.Context(), f.nc, protocol.Subjects{}, "alice", []byte(`{"prompt": "flood"}`))
			return err
		})
		start := time.Now()
		ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
		defer cancel()
		res, _, err := coordinator.WaitResult(ctx, f.js, protocol.Subjects{}, resp.ResultKey)
		elapsed := time.Since(start)
		if err != nil || res.TerminationReason != "natural" || res.Answer != "flood said result\n" {
			t.Fatalf("result %+v %v", res, err)
		}
		if strings.Contains(string(res.Messages), "step ") {
			t.Fatalf("progress reached the transcript: %s", res.Messages)
		}
		// The last report is published before the result; wait for it
		// (it goes through the coordinator), then take what is queued.
		want := "fleet.run.progress.alice." + string(resp.RunID)
		var n int
		var last protocol.Progress
		timeout := time.After(20 * time.Second)
		for last.Seq < 100000 || len(progress) > 0 {
			var m *nats.Msg
			select {
			case m = <-progress:
			case <-timeout:
				t.Fatalf("no last report; %d reports, the last %+v", n, last)
			}
			if _, err := protocol.DecodeCallStarted(m.Data, 0); err == nil {
				continue // the call's start, beside its reports
			}
			p, err := protocol.DecodeProgress(m.Data, 0)
			if err != nil || m.Subject != want || p.RunID != resp.RunID || p.CallID != "f" || p.Tool != "flood" {
				t.Fatalf("report on %s: %+v %v", m.Subject, p, err)
			}
			if p.Seq <= last.Seq {
				t.Errorf("report %d after %d", p.Seq, last.Seq)
			}
			n, last = n+1, p
		}
		bound := workerbus.ProgressRate + int(math.Ceil(elapsed.Seconds()))*workerbus.ProgressRate + 1
		t.Logf("client saw %d reports of 100000 in %v (bound %d); last %q seq %d, %d dropped", n, elapsed, bound, last.Message, last.Seq, last.Dropped)
		if n == 0 || n > bound {
			t.Errorf("client saw %d reports, want 1..%d", n, bound)
		}
		if last.Message != "step 99999" || last.Seq != 100000 || last.Dropped+uint64(n) != 100000 {
			t.Errorf("last report %+v after %d: want step 99999, seq 100000, the rest counted as dropped", last, n)
		}
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	first := run()
	second := run()
	t.Logf("heap after the first flood %d KiB, after the second %d KiB", first/1024, second/1024)
	if second > first+8<<20 {
		t.Errorf("heap grew by %d KiB over a second flood", (second-first)/1024)
	}
}

// TestFollowProgress: a submitter following its run gets the run's valid
// reports and nothing else.
func TestFollowProgress(t *testing.T) {
	f := newServeFleet(t)
	got := make(chan protocol.Progress, 8)
	stop, err := coordinator.FollowProgress(f.nc, protocol.Subjects{}, "alice", "run1", func(p protocol.Progress) { got <- p })
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if err := f.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, body := range []string{
		`garbage`,
		`{"v":1,"run_id":"run2","call_key":"k","seq":1,"message":"another run's"}`,
		`{"v":1,"run_id":"run1","call_key":"k","call_id":"c1","tool":"slow","seq":1,"message":"half way"}`,
	} {
		if err := f.nc.Publish("fleet.run.progress.alice.run1", []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case p := <-got:
		if p.Message != "half way" || p.CallID != "c1" {
			t.Errorf("report %+v", p)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no report")
	}
	if len(got) != 0 {
		t.Errorf("%d more reports", len(got))
	}
}
