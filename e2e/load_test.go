package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/internal/coordinator"
	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natstest"
	"github.com/toolfleet/toolfleet/internal/testsync"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/model/scripted"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// The load: loadRuns concurrent runs of loadRounds rounds of loadCalls
// calls each, through one coordinator (this process) and three worker
// processes.
const (
	loadRuns   = 50
	loadRounds = 4
	loadCalls  = 32
)

// TestLoad runs 50 concurrent runs of 4 rounds × 32 echo calls (6,400
// calls) through one coordinator — internal/coordinator in this process, so
// its goroutines, file descriptors and memory can be measured — and three
// toolworker processes. Every id is answered ok, nothing is logged at warn
// or above, goroutines and descriptors come back to their level before the
// runs, and the heap stays bounded.
func TestLoad(t *testing.T) {
	// Not parallel: it measures this process's goroutines, descriptors and
	// heap, which other tests running at the same time would move.
	f := newFleet(t)
	for i := range 3 {
		f.startWorker(fmt.Sprintf("w%d", i+1))
	}
	turns := make([]map[string]any, 0, loadRounds+1)
	for i := range loadRounds {
		turns = append(turns, map[string]any{"calls": map[string]any{
			"name": "echo", "count": loadCalls, "arguments": map[string]any{"text": fmt.Sprintf("round %d", i+1)},
		}})
	}
	turns = append(turns, final("all done"))
	data, _ := json.Marshal(map[string]any{"turns": turns})
	model, err := scripted.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	var logged loadLog
	c, err := coordinator.Open(t.Context(), coordinator.Config{
		Conn:    natsbus.ConnConfig{URL: f.url(), Getenv: func(string) string { return "" }},
		Workers: 0,
		Model:   model,
		Loop:    loop.Config{ToolTimeout: 30 * time.Second},
		Logger:  zerolog.New(&logged).Level(zerolog.InfoLevel),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	// One run first, so that everything created once (connections'
	// goroutines, the schema cache) exists before the baseline.
	checkLoadRun(t, runOnce(t, c))
	base := measure()
	t.Logf("before: %s", base)

	var peak peakHeap
	stopSampling := peak.sample(50 * time.Millisecond)
	start := time.Now()
	results := make([]*loop.Result, loadRuns)
	errs := make([]error, loadRuns)
	var wg sync.WaitGroup
	for i := range loadRuns {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			results[i], errs[i] = c.Run(ctx, fmt.Sprintf("load run %d", i))
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	stopSampling()

	calls := 0
	for i, res := range results {
		if errs[i] != nil {
			t.Fatalf("run %d: %v", i, errs[i])
		}
		calls += checkLoadRun(t, res)
	}
	if calls != loadRuns*loadRounds*loadCalls {
		t.Fatalf("%d calls answered, want %d", calls, loadRuns*loadRounds*loadCalls)
	}
	// Warnings mean trouble: a dropped event, a refused message, results
	// that could not be read. A run's results consumer that missed its idle
	// heartbeats on a saturated machine and re-created itself lost nothing
	// (info), and is only reported.
	warnings, recoveries := logged.warnings(), logged.recoveries.Load()
	if warnings != "" {
		t.Errorf("the coordinator logged warnings under load:\n%s", tail(warnings, 4000))
	}
	if recoveries > 0 {
		t.Logf("%d reads of a run's results recovered by themselves", recoveries)
	}

	// Whatever the runs started has stopped: goroutines and descriptors
	// come back to their level (a leak per run would be 50 or more), and
	// the heap returns near its baseline.
	var after snapshot
	natstest.WaitFor(t, 15*time.Second, func() error {
		after = measure()
		if after.goroutines > base.goroutines+5 || after.fds > base.fds+2 {
			return fmt.Errorf("after the runs %s; before %s", after, base)
		}
		return nil
	})
	t.Logf("after:  %s", after)
	t.Logf("load: %d runs × %d rounds × %d calls = %d calls in %v (%.0f calls/s); peak heap in use %d MiB",
		loadRuns, loadRounds, loadCalls, calls, elapsed.Round(time.Millisecond),
		float64(calls)/elapsed.Seconds(), peak.max()>>20)
	if peak.max() > 512<<20 {
		t.Errorf("peak heap in use %d MiB, want at most 512 MiB", peak.max()>>20)
	}
	if after.heap > base.heap+64<<20 {
		t.Errorf("heap in use grew from %d MiB to %d MiB over the runs", base.heap>>20, after.heap>>20)
	}
}

// loadLog keeps a coordinator's log lines at warn and above, and counts
// those saying that reading a run's results recovered by itself.
type loadLog struct {
	warn       testsync.Buffer
	recoveries atomic.Int64
}

func (l *loadLog) Write(p []byte) (int, error) { return l.WriteLevel(zerolog.NoLevel, p) }

func (l *loadLog) WriteLevel(level zerolog.Level, p []byte) (int, error) {
	switch {
	case level >= zerolog.WarnLevel || level == zerolog.NoLevel:
		return l.warn.Write(p)
	case bytes.Contains(p, []byte(`"reading the results: recovering"`)):
		l.recoveries.Add(1)
	}
	return len(p), nil
}

func (l *loadLog) warnings() string { return l.warn.String() }

// runOnce runs one load script.
func runOnce(t *testing.T, c *coordinator.Coordinator) *loop.Result {
	t.Helper()
	res, err := c.Run(t.Context(), "warm-up")
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// checkLoadRun checks one load run: natural end, every id answered ok with
// its round's text. It returns the number of calls.
func checkLoadRun(t *testing.T, res *loop.Result) int {
	t.Helper()
	recs, obs := answered(t, res)
	if res.TerminationReason != loop.TerminationNatural || res.Answer != "all done" {
		t.Fatalf("run %s ended %q with %q", res.RunID, res.TerminationReason, res.Answer)
	}
	if len(recs) != loadRounds*loadCalls {
		t.Fatalf("run %s answered %d calls, want %d", res.RunID, len(recs), loadRounds*loadCalls)
	}
	for id, r := range recs {
		if r.Outcome != protocol.OutcomeOK || obs[id] != fmt.Sprintf("round %d", r.Round) {
			t.Fatalf("run %s call %s = %+v, observation %q", res.RunID, id, r, obs[id])
		}
	}
	return len(recs)
}

// snapshot is what the test measures of its own process.
type snapshot struct {
	goroutines int
	fds        int
	heap       uint64 // HeapInuse after a GC
}

func (s snapshot) String() string {
	return fmt.Sprintf("%d goroutines, %d fds, %d MiB heap in use", s.goroutines, s.fds, s.heap>>20)
}

func measure() snapshot {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	fds, _ := os.ReadDir("/proc/self/fd")
	return snapshot{goroutines: runtime.NumGoroutine(), fds: len(fds), heap: ms.HeapInuse}
}

// peakHeap samples HeapInuse.
type peakHeap struct {
	mu   sync.Mutex
	peak uint64
}

func (p *peakHeap) sample(every time.Duration) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			p.mu.Lock()
			p.peak = max(p.peak, ms.HeapInuse)
			p.mu.Unlock()
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

func (p *peakHeap) max() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.peak
}
