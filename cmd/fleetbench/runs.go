package main

import (
	"cmp"
	"context"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/toolfleet/toolfleet/pkg/loop"
)

// roundsPerRun is how many rounds of tool calls each benchmark run asks
// for before its final answer: all the loop's default MaxRounds allows.
const roundsPerRun = loop.DefaultMaxRounds - 1

// roundModel asks for calls calls to tool in each of rounds rounds, then
// answers. It times each round from its own answer to the loop's next
// request by writing the answer's time into the assistant message.
type roundModel struct {
	tool    string
	args    string
	want    string // the output every call must observe
	calls   int
	rounds  int
	stop    *atomic.Bool        // when set, the next request gets the final answer
	onRound func(time.Duration) // each round's duration
	onCalls func(ok, notOK int) // each round's calls
}

var _ loop.Model = (*roundModel)(nil)

func (m *roundModel) Complete(_ context.Context, req loop.Request) (*loop.Response, error) {
	now := time.Now()
	msgs := req.Messages
	asked, last := 0, -1
	for i := range msgs {
		if msgs[i].Role == "assistant" {
			asked++
			last = i
		}
	}
	if last >= 0 {
		if t, err := strconv.ParseInt(msgs[last].Content, 10, 64); err == nil && m.onRound != nil {
			m.onRound(now.Sub(time.Unix(0, t)))
		}
		ok, bad := 0, 0
		for _, msg := range msgs[last+1:] {
			if msg.Content == m.want {
				ok++
			} else {
				bad++
			}
		}
		if m.onCalls != nil {
			m.onCalls(ok, bad)
		}
	}
	if asked >= m.rounds || (m.stop != nil && m.stop.Load()) {
		return &loop.Response{Message: loop.Message{Role: "assistant", Content: "done"}, FinishReason: "stop"}, nil
	}
	calls := make([]loop.ToolCall, m.calls)
	for i := range calls {
		calls[i] = loop.ToolCall{
			ID: "call_" + strconv.Itoa(asked) + "_" + strconv.Itoa(i), Type: "function",
			Function: loop.FunctionCall{Name: m.tool, Arguments: m.args},
		}
	}
	stamp := strconv.FormatInt(time.Now().UnixNano(), 10)
	return &loop.Response{
		Message:      loop.Message{Role: "assistant", Content: stamp, ToolCalls: calls},
		FinishReason: "tool_calls",
	}, nil
}

// runner returns a loop.Runner of the fleet over m.
func (f *fleet) runner(m loop.Model) (*loop.Runner, error) {
	return loop.New(loop.Config{Logger: f.log}, m, f.catalog, f.disp, nil)
}

// checkRun refuses a run that did not end naturally.
func checkRun(res *loop.Result, err error) error {
	if err != nil {
		return err
	}
	if res.TerminationReason != loop.TerminationNatural {
		return fmt.Errorf("run ended %s", res.TerminationReason)
	}
	return nil
}

// loopLatency times rounds of calls calls to tool through the loop, n
// rounds in all (in runs of roundsPerRun rounds), one run at a time.
func (f *fleet) loopLatency(ctx context.Context, n, calls int, tool, args, want string) (summary, error) {
	var s samples
	var bad atomic.Int64
	recording := false
	m := &roundModel{tool: tool, args: args, want: want, calls: calls, rounds: roundsPerRun,
		onRound: func(d time.Duration) {
			if recording {
				s.add(d)
			}
		},
		onCalls: func(_, notOK int) { bad.Add(int64(notOK)) },
	}
	r, err := f.runner(m)
	if err != nil {
		return summary{}, err
	}
	runs := (n + roundsPerRun - 1) / roundsPerRun
	cpu := startCPU()
	for i := range warmup(runs) + runs {
		recording = i >= warmup(runs)
		if err := checkRun(r.Run(ctx, "bench")); err != nil {
			return summary{}, err
		}
	}
	if b := bad.Load(); b > 0 {
		return summary{}, fmt.Errorf("%w: %d calls", errNotOK, b)
	}
	sum := s.summary()
	sum.cpu = cpu.per((warmup(runs) + runs) * roundsPerRun * calls)
	return sum, nil
}

// loopSustained keeps conc runs going, each asking for rounds of calls
// calls to tool, until the window ends.
func (f *fleet) loopSustained(ctx context.Context, conc, calls int, tool, args, want string, warm, d time.Duration) (*window, error) {
	w := newWindow(warm, d)
	var stop atomic.Bool
	var bad atomic.Int64
	m := &roundModel{tool: tool, args: args, want: want, calls: calls, rounds: roundsPerRun, stop: &stop,
		onCalls: func(ok, notOK int) { w.record(ok); bad.Add(int64(notOK)) }}
	r, err := f.runner(m)
	if err != nil {
		return nil, err
	}
	errs := make(chan error, conc)
	for range conc {
		go func() {
			for time.Now().Before(w.end) {
				if err := checkRun(r.Run(ctx, "bench")); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	time.AfterFunc(time.Until(w.end), func() { stop.Store(true) })
	var first error
	for range conc {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	if b := bad.Load(); b > 0 && first == nil {
		first = fmt.Errorf("%w: %d calls", errNotOK, b)
	}
	return w, first
}

// memReport is what the concurrent-runs phase measured.
type memReport struct {
	runs        int
	idleLive    uint64  // live heap before the runs started
	live        uint64  // median live heap while the runs were held
	perRun      float64 // (live - idleLive) / runs active
	maxInUse    uint64  // highest HeapInuse seen
	rate        string
	cpu         time.Duration // CPU time per call, the forced GCs included
	active      int           // runs active at the median sample
	sampleCount int
}

// heldRuns holds conc runs (rounds of 4 echo calls each, restarted as they
// end) for d and measures calls/s and the live heap they hold.
func (f *fleet) heldRuns(ctx context.Context, conc int, warm, d time.Duration) (memReport, error) {
	rep := memReport{runs: conc}
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	rep.idleLive = ms.HeapAlloc

	var active atomic.Int64
	var stop atomic.Bool
	var bad atomic.Int64
	w := newWindow(warm, d)
	m := &roundModel{tool: echoTool, args: echoArgs, want: echoText, calls: 4, rounds: roundsPerRun, stop: &stop,
		onCalls: func(ok, notOK int) { w.record(ok); bad.Add(int64(notOK)) }}
	r, err := f.runner(m)
	if err != nil {
		return rep, err
	}
	errs := make(chan error, conc)
	for range conc {
		go func() {
			for time.Now().Before(w.end) {
				active.Add(1)
				err := checkRun(r.Run(ctx, "bench"))
				active.Add(-1)
				if err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	time.AfterFunc(time.Until(w.end), func() { stop.Store(true) })

	// Sample the heap: in use every 50ms, live (after a GC) 3 times.
	type live struct {
		bytes  uint64
		active int
	}
	var lives []live
	gcAt := []time.Time{w.start.Add(d / 4), w.start.Add(d / 2), w.start.Add(3 * d / 4)}
	tick := time.NewTicker(50 * time.Millisecond)
	var wg sync.WaitGroup
	done := make(chan struct{})
	wg.Go(func() {
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			if len(gcAt) > 0 && time.Now().After(gcAt[0]) {
				gcAt = gcAt[1:]
				runtime.GC()
				runtime.ReadMemStats(&ms)
				lives = append(lives, live{ms.HeapAlloc, int(active.Load())})
			} else {
				runtime.ReadMemStats(&ms)
			}
			rep.maxInUse = max(rep.maxInUse, ms.HeapInuse)
		}
	})
	var first error
	for range conc {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	close(done)
	wg.Wait()
	if b := bad.Load(); b > 0 && first == nil {
		first = fmt.Errorf("%w: %d calls", errNotOK, b)
	}
	rep.rate, rep.cpu = w.rate(), w.cpuPerCall()
	rep.sampleCount = len(lives)
	if len(lives) > 0 {
		slices.SortFunc(lives, func(a, b live) int { return cmp.Compare(a.bytes, b.bytes) })
		mid := lives[len(lives)/2]
		rep.live, rep.active = mid.bytes, mid.active
		if mid.active > 0 && mid.bytes > rep.idleLive {
			rep.perRun = float64(mid.bytes-rep.idleLive) / float64(mid.active)
		}
	}
	return rep, first
}
