package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/coordinator"
	"github.com/toolfleet/toolfleet/internal/natsbus/stores"
	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
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
	return loop.New(loop.Config{Logger: f.log, ToolTimeout: f.toolTimeout}, m, f.catalog, f.disp, nil)
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
	return f.loopLatencyOf(ctx, n, calls, tool, args, want, false)
}

// loopLatencyJournaled is loopLatency for durable runs: every run journaled
// in the journal stream (one fenced append a round: the round before's
// observations, the model response and the dispatch; the publish too,
// overlapping the gather, when the gather takes longer than 250 ms; tools
// only when they change).
func (f *fleet) loopLatencyJournaled(ctx context.Context, n, calls int, tool, args, want string) (summary, error) {
	if _, err := f.js.CreateStream(ctx, coordinator.JournalStreamConfig(f.subjects)); err != nil &&
		!errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		return summary{}, err
	}
	return f.loopLatencyOf(ctx, n, calls, tool, args, want, true)
}

func (f *fleet) loopLatencyOf(ctx context.Context, n, calls int, tool, args, want string, journaled bool) (summary, error) {
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
		if !journaled {
			if err := checkRun(r.Run(ctx, "bench")); err != nil {
				return summary{}, err
			}
			continue
		}
		run := protocol.NewRunID()
		j, err := stores.OpenJournal(ctx, f.js, f.subjects, run, "fleetbench", "start")
		if err != nil {
			return summary{}, err
		}
		if err := checkRun(r.RunDurable(ctx, loop.Durable{Prompt: "bench", RunID: run, Journal: j})); err != nil {
			return summary{}, err
		}
	}
	if b := bad.Load(); b > 0 {
		return summary{}, fmt.Errorf("%w: %d calls", errNotOK, b)
	}
	sum := s.summary()
	sum.calls = (warmup(runs) + runs) * roundsPerRun * calls
	sum.cpu = cpu.per(sum.calls)
	sum.msgs = cpu.msgsPer(sum.calls)
	return sum, nil
}

// loopSustained keeps conc runs going, each asking for rounds of calls
// calls to tool, until the window ends; journaled, each run is durable,
// journaled in the journal stream as a served run is.
func (f *fleet) loopSustained(ctx context.Context, conc, calls int, tool, args, want string, warm, d time.Duration, journaled bool) (*window, error) {
	if journaled {
		if _, err := f.js.CreateStream(ctx, coordinator.JournalStreamConfig(f.subjects)); err != nil &&
			!errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return nil, err
		}
	}
	w := newWindow(warm, d)
	var stop atomic.Bool
	var bad atomic.Int64
	m := &roundModel{tool: tool, args: args, want: want, calls: calls, rounds: roundsPerRun, stop: &stop,
		onCalls: func(ok, notOK int) { w.record(ok); bad.Add(int64(notOK)) }}
	r, err := f.runner(m)
	if err != nil {
		return nil, err
	}
	one := func() error { return checkRun(r.Run(ctx, "bench")) }
	if journaled {
		one = func() error {
			run := protocol.NewRunID()
			j, err := stores.OpenJournal(ctx, f.js, f.subjects, run, "fleetbench", "start")
			if err != nil {
				return err
			}
			return checkRun(r.RunDurable(ctx, loop.Durable{Prompt: "bench", RunID: run, Journal: j}))
		}
	}
	wait := goEach(conc, func() error { return w.repeat(0, one) })
	time.AfterFunc(time.Until(w.end), func() { stop.Store(true) })
	first := wait()
	if b := bad.Load(); b > 0 && first == nil {
		first = fmt.Errorf("%w: %d calls", errNotOK, b)
	}
	return w, first
}

// busyRuns keeps conc runs going (rounds of 4 echo calls each, restarted
// as they end) for d and measures calls/s and the heap in use meanwhile.
func (f *fleet) busyRuns(ctx context.Context, conc int, warm, d time.Duration) (w *window, maxInUse uint64, err error) {
	var stop atomic.Bool
	var bad atomic.Int64
	w = newWindow(warm, d)
	m := &roundModel{tool: echoTool, args: echoArgs, want: echoText, calls: 4, rounds: roundsPerRun, stop: &stop,
		onCalls: func(ok, notOK int) { w.record(ok); bad.Add(int64(notOK)) }}
	r, err := f.runner(m)
	if err != nil {
		return nil, 0, err
	}
	wait := goEach(conc, func() error {
		return w.repeat(0, func() error { return checkRun(r.Run(ctx, "bench")) })
	})
	time.AfterFunc(time.Until(w.end), func() { stop.Store(true) })
	done := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Go(func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		var ms runtime.MemStats
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			runtime.ReadMemStats(&ms)
			maxInUse = max(maxInUse, ms.HeapInuse)
		}
	})
	first := wait()
	close(done)
	sampler.Wait()
	if b := bad.Load(); b > 0 && first == nil {
		first = fmt.Errorf("%w: %d calls", errNotOK, b)
	}
	return w, maxInUse, first
}

// holdTool answers once release is closed: the calls of held runs wait on
// it.
func holdTool(release <-chan struct{}) harness.Tool {
	return harness.Tool{
		Name:        holdToolName,
		Description: "Wait until the benchmark lets go, then answer.",
		Parameters:  json.RawMessage(`{"type":"object","properties":{},"additionalProperties":false}`),
		Timeout:     time.Minute,
		Idempotent:  true,
		Run: func(ctx context.Context, _ json.RawMessage) (string, error) {
			select {
			case <-release:
				return "held", nil
			case <-ctx.Done():
				return "", ctx.Err()
			}
		},
	}
}

// liveGC collects twice, so that what sync.Pools hold (kept through one
// collection as their victims) is not counted live: earlier phases leave
// tens of MiB there, which one collection would count in the idle heap and
// free before the held heap is measured, making the runs look free.
func liveGC() {
	runtime.GC()
	runtime.GC()
}

// memReport is what holding runs measured.
type memReport struct {
	runs       int
	idleLive   uint64  // live heap and goroutine stacks before the runs started
	heldLive   uint64  // the same while every run waited on its calls
	perRun     float64 // (heldLive - idleLive) / runs
	heldInUse  uint64  // heap in use then
	goroutines int     // goroutines added by the held runs
}

// heldRuns starts conc runs whose one round of 4 calls waits on a tool that
// answers only when released, waits until every call is published, and
// measures the live heap (after a GC) and the goroutine stacks against the
// same before the runs started. The difference is what holding the runs costs: the loop's
// state, the inboxes and their subscriptions, the in-flight calls in the
// workers and the queued calls in the server (all one process here).
func (f *fleet) heldRuns(ctx context.Context, conc int) (memReport, error) {
	rep := memReport{runs: conc}
	release := make(chan struct{})
	var once sync.Once
	letGo := func() { once.Do(func() { close(release) }) }
	defer letGo()
	ws, err := f.startWorkers(ctx, 2, 0, holdTool(release))
	if err != nil {
		return rep, err
	}
	defer ws.stop()

	var ms runtime.MemStats
	liveGC()
	runtime.ReadMemStats(&ms)
	rep.idleLive = ms.HeapAlloc + ms.StackInuse
	idleGoroutines := runtime.NumGoroutine()

	m := &roundModel{tool: holdToolName, args: "{}", want: "held", calls: 4, rounds: 1}
	r, err := f.runner(m)
	if err != nil {
		return rep, err
	}
	errs := make(chan error, conc)
	for range conc {
		go func() { errs <- checkRun(r.Run(ctx, "bench")) }()
	}
	// Held once the server has every call: queued or with a worker.
	durable, err := f.subjects.Consumer(holdToolName)
	if err != nil {
		return rep, err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := f.js.Consumer(ctx, f.subjects.CallsStream(), durable)
		if err == nil {
			if info, err := c.Info(ctx); err == nil && int(info.NumPending)+info.NumAckPending >= 4*conc {
				break
			}
		}
		if time.Now().After(deadline) {
			return rep, fmt.Errorf("%d runs not all holding their calls within 30s", conc)
		}
		time.Sleep(10 * time.Millisecond) // polling the server, not synchronising
	}
	liveGC()
	runtime.ReadMemStats(&ms)
	rep.heldLive, rep.heldInUse = ms.HeapAlloc+ms.StackInuse, ms.HeapInuse
	rep.goroutines = runtime.NumGoroutine() - idleGoroutines
	if rep.heldLive > rep.idleLive {
		rep.perRun = float64(rep.heldLive-rep.idleLive) / float64(conc)
	}
	letGo()
	var first error
	for range conc {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return rep, first
}
