package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natsbus/dispatch"
	"github.com/toolfleet/toolfleet/internal/natsbus/stores"
	"github.com/toolfleet/toolfleet/internal/natsbus/workerbus"
	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// Tools the fleet serves in the benchmark.
const (
	echoTool     = "echo"
	sleepTool    = "sleep20"
	holdToolName = "hold"
	echoOnceTool = "echo_once"
	sleepFor     = 20 * time.Millisecond
	// echoText is what every echo call sends and expects back: 128 bytes.
	echoText = "The quick brown fox jumps over the lazy dog; pack my box with five dozen liquor jugs. Sphinx of black quartz, judge my vow!!!!!"
	// callTimeout is the deadline of every call the benchmark makes (and
	// the bound on a baseline round trip), unless --short makes it
	// shortCallTimeout.
	callTimeout = 5 * time.Second
	// shortCallTimeout is callTimeout with --short, which CI runs beside
	// other tests on a loaded machine (and under the race detector): a
	// starved process may take seconds to answer, so only a call that is
	// lost, not one that is slow, fails the run.
	shortCallTimeout = time.Minute
)

var (
	echoArgs  = mustJSON(map[string]string{"text": echoText})
	sleepArgs = "{}"
)

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// echoOnce is echo declared non-idempotent: each call is claimed before
// it runs, so it runs at most once.
func echoOnce() harness.Tool {
	t := harness.Echo()
	t.Name, t.Idempotent = echoOnceTool, false
	t.Description = "Return the given text unchanged, at most once."
	return t
}

// sleeper is a Go tool that sleeps 20 ms, honouring its context.
func sleeper() harness.Tool {
	return harness.Tool{
		Name:        sleepTool,
		Description: "Sleep 20 ms and answer.",
		Parameters:  json.RawMessage(`{"type":"object","properties":{},"additionalProperties":false}`),
		Timeout:     callTimeout,
		Idempotent:  true,
		Run: func(ctx context.Context, _ json.RawMessage) (string, error) {
			t := time.NewTimer(sleepFor)
			defer t.Stop()
			select {
			case <-t.C:
				return "slept", nil
			case <-ctx.Done():
				return "", ctx.Err()
			}
		},
	}
}

// fleet is the coordinator side of the benchmark: one connection with its
// dispatcher and catalog, on the fleet's streams.
type fleet struct {
	url     string
	log     zerolog.Logger
	timeout time.Duration // of every call, and of dispatched rounds
	// toolTimeout overrides the tools' own timeouts in the loop's runs
	// (0: each tool's own).
	toolTimeout time.Duration
	subjects    protocol.Subjects
	nc          *nats.Conn
	js          jetstream.JetStream
	disp        *dispatch.Dispatcher
	catalog     *stores.Catalog
}

// openFleet opens the coordinator side on the server at url. With short,
// calls get shortCallTimeout instead of callTimeout.
func openFleet(ctx context.Context, url string, log zerolog.Logger, short bool, replicas int) (*fleet, error) {
	f := &fleet{url: url, log: log, timeout: callTimeout}
	if short {
		f.timeout, f.toolTimeout = shortCallTimeout, shortCallTimeout
	}
	var err error
	f.nc, err = natsbus.Connect(ctx, natsbus.ConnConfig{URL: url, Name: "fleetbench-coordinator", Logger: log})
	if err != nil {
		return nil, err
	}
	if f.js, err = jetstream.New(f.nc); err != nil {
		f.close()
		return nil, err
	}
	// fleetbench is one client: its share of a tool is as many calls as
	// the calls stream holds, as a fleet with one client would be
	// provisioned (the runs phase holds 4 calls of each of --runs runs).
	streams := natsbus.StreamConfig{Replicas: replicas, MaxCallsPerClient: natsbus.DefaultMaxPendingCalls}
	if err := natsbus.EnsureStreams(ctx, f.js, f.subjects, streams); err != nil {
		f.close()
		return nil, err
	}
	h, err := harness.New(harness.Config{}, harness.Echo(), echoOnce(), sleeper(), holdTool(nil))
	if err != nil {
		f.close()
		return nil, err
	}
	if err := stores.PublishSpecs(ctx, f.js, f.subjects, h.Specs(), log); err != nil {
		f.close()
		return nil, err
	}
	if f.catalog, err = stores.NewCatalog(ctx, f.js, f.subjects, log); err != nil {
		f.close()
		return nil, err
	}
	f.disp = dispatch.NewDispatcher(f.nc, f.js, f.subjects, dispatch.DispatcherConfig{Logger: log})
	return f, nil
}

func (f *fleet) close() {
	if f.catalog != nil {
		f.catalog.Close()
	}
	if f.nc != nil {
		f.nc.Close()
	}
}

// workers is a set of running workers, each on its own connection.
type workers struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	conns  []*nats.Conn
	errs   chan error
	ws     []*workerbus.Worker
}

// pulls sums the workers' pulls of calls and the calls they took.
func (ws *workers) pulls() (pulls, calls int64) {
	for _, w := range ws.ws {
		p, c := w.Pulls()
		pulls += p
		calls += c
	}
	return pulls, calls
}

// pullsSince says how many calls the workers took per pull since
// (pulls, calls) were read.
func (ws *workers) pullsSince(pulls, calls int64) string {
	p, c := ws.pulls()
	if p <= pulls {
		return ""
	}
	return fmt.Sprintf("workers' pulls: %.1f calls per pull (%d pulls)", float64(c-calls)/float64(p-pulls), p-pulls)
}

// startWorkers starts n workers serving tool with concurrency slots each,
// and waits until every one of them is pulling.
func (f *fleet) startWorkers(ctx context.Context, n, concurrency int, tool harness.Tool) (*workers, error) {
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	ws := &workers{cancel: cancel, errs: make(chan error, n)}
	for i := range n {
		nc, err := natsbus.Connect(ctx, natsbus.ConnConfig{URL: f.url, Name: fmt.Sprintf("fleetbench-worker-%d", i+1), Logger: f.log})
		if err != nil {
			ws.stop()
			return nil, err
		}
		ws.conns = append(ws.conns, nc)
		js, err := jetstream.New(nc)
		if err != nil {
			ws.stop()
			return nil, err
		}
		h, err := harness.New(harness.Config{Logger: f.log}, tool)
		if err != nil {
			ws.stop()
			return nil, err
		}
		w, err := workerbus.NewWorker(nc, js, f.subjects, h, workerbus.WorkerConfig{
			Name:        fmt.Sprintf("bench-%d", i+1),
			Concurrency: concurrency,
			Logger:      f.log,
		})
		if err != nil {
			ws.stop()
			return nil, err
		}
		ws.ws = append(ws.ws, w)
		ws.wg.Go(func() {
			if err := w.Run(wctx); err != nil {
				ws.errs <- err
			}
		})
	}
	// Ready when the tool's consumer holds a waiting pull from every worker.
	name, err := protocol.ParseToolName(tool.Name)
	if err != nil {
		ws.stop()
		return nil, err
	}
	durable, err := f.subjects.Consumer(name)
	if err != nil {
		ws.stop()
		return nil, err
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := f.js.Consumer(ctx, f.subjects.CallsStream(), durable)
		if err == nil {
			info, err := c.Info(ctx)
			if err == nil && info.NumWaiting >= n {
				return ws, nil
			}
		}
		select {
		case err := <-ws.errs:
			ws.stop()
			return nil, fmt.Errorf("worker: %w", err)
		default:
		}
		if time.Now().After(deadline) {
			ws.stop()
			return nil, fmt.Errorf("%d workers of %s not pulling within 10s", n, tool.Name)
		}
		time.Sleep(5 * time.Millisecond) // polling the server, not synchronising
	}
}

func (ws *workers) stop() {
	ws.cancel()
	ws.wg.Wait()
	for _, nc := range ws.conns {
		nc.Close()
	}
}

// errNotOK is a call that did not answer ok.
var errNotOK = errors.New("a call did not answer ok")

// dispatchRound publishes n calls to tool through the dispatcher, as the
// loop does (one call with Publish, more as one batch), and waits for their
// results on in.
func (f *fleet) dispatchRound(ctx context.Context, in *dispatch.Inbox, run protocol.RunID, tool protocol.ToolName, args string, n int) error {
	deadline := time.Now().Add(f.timeout)
	open := make(map[protocol.CallKey]bool, n)
	batch := make([]loop.Outgoing, 0, n)
	for i := range n {
		call := protocol.Call{
			V: protocol.Version, RunID: run, Round: 1, CallKey: protocol.NewCallKey(), CallID: protocol.CallID("call_" + fmt.Sprint(i)),
			Tool: tool, Arguments: json.RawMessage(args), Deadline: deadline,
			MaxOutputChars: loop.DefaultMaxObservationChars,
		}
		open[call.CallKey] = true
		batch = append(batch, loop.Outgoing{Call: call})
	}
	errs := make(chan error, 1)
	go func() {
		pctx, cancel := context.WithDeadline(ctx, deadline)
		defer cancel()
		if n == 1 {
			errs <- f.disp.Publish(pctx, batch[0])
			return
		}
		errs <- errors.Join(f.disp.PublishBatch(pctx, batch)...)
	}()
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	published := false
	for len(open) > 0 || !published {
		select {
		case err := <-errs:
			if err != nil {
				return err
			}
			published = true
		case ev := <-in.Events():
			if ev.Result == nil || !open[ev.Result.CallKey] {
				continue
			}
			delete(open, ev.Result.CallKey)
			if ev.Result.Outcome != protocol.OutcomeOK {
				return fmt.Errorf("%w: %s", errNotOK, ev.Result.Outcome)
			}
		case <-timer.C:
			return fmt.Errorf("%d of %d results missing after %v", len(open), n, f.timeout)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// openInbox opens a run's inbox on the dispatcher.
func (f *fleet) openInbox(ctx context.Context) (*dispatch.Inbox, protocol.RunID, error) {
	run := protocol.NewRunID()
	in, err := f.disp.Open(ctx, run)
	if err != nil {
		return nil, "", err
	}
	return in.(*dispatch.Inbox), run, nil
}

// openClose times n sequential opens and closes of a run's inbox: what the
// loop pays once per run before its first call is published.
func (f *fleet) openClose(ctx context.Context, n int) (summary, error) {
	var s samples
	cpu := startCPU()
	for i := range warmup(n) + n {
		start := time.Now()
		in, _, err := f.openInbox(ctx)
		if err != nil {
			return summary{}, err
		}
		if err := in.Close(); err != nil {
			return summary{}, err
		}
		if i >= warmup(n) {
			s.add(time.Since(start))
		}
	}
	sum := s.summary()
	sum.cpu = cpu.per(warmup(n) + n)
	sum.msgs = cpu.msgsPer(warmup(n) + n)
	return sum, nil
}

// dispatchLatency is n sequential rounds of calls calls each on one inbox.
func (f *fleet) dispatchLatency(ctx context.Context, n, calls int) (summary, error) {
	in, run, err := f.openInbox(ctx)
	if err != nil {
		return summary{}, err
	}
	defer in.Close()
	var s samples
	cpu := startCPU()
	for i := range warmup(n) + n {
		start := time.Now()
		if err := f.dispatchRound(ctx, in, run, echoTool, echoArgs, calls); err != nil {
			return summary{}, err
		}
		if i >= warmup(n) {
			s.add(time.Since(start))
		}
	}
	sum := s.summary()
	sum.calls = (warmup(n) + n) * calls
	sum.cpu = cpu.per(sum.calls)
	sum.msgs = cpu.msgsPer(sum.calls)
	return sum, nil
}

// window counts calls finished between its start and end, and the CPU
// time the process used and the server's messages meanwhile.
type window struct {
	start, end time.Time
	calls      atomic.Int64
	// total counts every call finished, before, in and after the window.
	total     atomic.Int64
	cpuStart  atomic.Int64
	cpuEnd    atomic.Int64
	msgsStart atomic.Int64
	msgsEnd   atomic.Int64
}

func newWindow(warm, d time.Duration) *window {
	now := time.Now()
	w := &window{start: now.Add(warm), end: now.Add(warm + d)}
	time.AfterFunc(warm, func() { w.cpuStart.Store(int64(cpuTime())); w.msgsStart.Store(countServerMsgs()) })
	time.AfterFunc(warm+d, func() { w.cpuEnd.Store(int64(cpuTime())); w.msgsEnd.Store(countServerMsgs()) })
	return w
}

// msgsPerCall is the server's messages per call counted in the window.
func (w *window) msgsPerCall() float64 {
	n, start, end := w.calls.Load(), w.msgsStart.Load(), w.msgsEnd.Load()
	if n == 0 || end < start || serverMsgs == nil {
		return 0
	}
	return float64(end-start) / float64(n)
}

// cpuPerCall is the process's CPU time per call counted in the window.
func (w *window) cpuPerCall() time.Duration {
	n, start, end := w.calls.Load(), w.cpuStart.Load(), w.cpuEnd.Load()
	if n == 0 || start == 0 || end < start {
		return 0
	}
	return time.Duration((end - start) / n)
}

func (w *window) record(n int) {
	w.total.Add(int64(n))
	if now := time.Now(); now.After(w.start) && now.Before(w.end) {
		w.calls.Add(int64(n))
	}
}

// repeat runs round until the window ends, recording calls calls after
// each; it returns round's first error.
func (w *window) repeat(calls int, round func() error) error {
	for time.Now().Before(w.end) {
		if err := round(); err != nil {
			return err
		}
		w.record(calls)
	}
	return nil
}

// goEach runs work in conc goroutines and returns wait, which waits for
// all of them and returns the first error.
func goEach(conc int, work func() error) (wait func() error) {
	errs := make(chan error, conc)
	for range conc {
		go func() { errs <- work() }()
	}
	return func() error {
		var first error
		for range conc {
			if err := <-errs; err != nil && first == nil {
				first = err
			}
		}
		return first
	}
}

func (w *window) rate() string { return rate(w.calls.Load(), w.end.Sub(w.start)) }

// dispatchSustained keeps conc inboxes busy with rounds of 32 echo calls
// until the window ends.
func (f *fleet) dispatchSustained(ctx context.Context, conc int, warm, d time.Duration) (*window, error) {
	w := newWindow(warm, d)
	wait := goEach(conc, func() error {
		in, run, err := f.openInbox(ctx)
		if err != nil {
			return err
		}
		defer in.Close()
		return w.repeat(fanout, func() error { return f.dispatchRound(ctx, in, run, echoTool, echoArgs, fanout) })
	})
	return w, wait()
}

// otherCoordinators opens n dispatchers, each on its own connection with
// one run open, so that each reads every result of the results stream
// through its consumer and drops those of runs it does not hold, as the
// other coordinators sharing a fleet's results stream do. The returned
// function closes them.
func (f *fleet) otherCoordinators(ctx context.Context, n int) (func(), error) {
	var closers []func()
	closeAll := func() {
		for _, c := range closers {
			c()
		}
	}
	for i := range n {
		nc, err := natsbus.Connect(ctx, natsbus.ConnConfig{URL: f.url, Name: fmt.Sprintf("fleetbench-other-coordinator-%d", i+1), Logger: f.log})
		if err != nil {
			closeAll()
			return nil, err
		}
		js, err := jetstream.New(nc)
		if err != nil {
			nc.Close()
			closeAll()
			return nil, err
		}
		d := dispatch.NewDispatcher(nc, js, f.subjects, dispatch.DispatcherConfig{Logger: f.log})
		in, err := d.Open(ctx, protocol.NewRunID())
		if err != nil {
			nc.Close()
			closeAll()
			return nil, err
		}
		closers = append(closers, func() { in.Close(); d.Close(); nc.Close() })
	}
	return closeAll, nil
}

// stored is the last sequence of every stream on the fleet's server, by
// name: between two readings, how many messages each stream stored.
type stored map[string]uint64

// stored reads the last sequence of every stream the server lists, so that
// a stream the fleet adds is counted without being named here.
func (f *fleet) stored(ctx context.Context) (stored, error) {
	s := stored{}
	streams := f.js.ListStreams(ctx)
	for info := range streams.Info() {
		s[info.Config.Name] = info.State.LastSeq
	}
	if err := streams.Err(); err != nil {
		return nil, fmt.Errorf("listing streams: %w", err)
	}
	return s, nil
}

// storedPerCall says how many messages the fleet stored per call since
// before, in all and by stream, for calls calls made between the two
// readings; made says which calls those are. A stream created since before
// counts from its first message.
func (f *fleet) storedPerCall(ctx context.Context, before stored, calls int64, made string) string {
	after, err := f.stored(ctx)
	if err != nil || calls <= 0 {
		return ""
	}
	type delta struct {
		stream string
		n      uint64
	}
	var deltas []delta
	var total uint64
	for name, last := range after {
		n := last
		if b, ok := before[name]; ok && b <= last {
			n = last - b
		}
		if n > 0 {
			deltas = append(deltas, delta{name, n})
			total += n
		}
	}
	// The calls and results streams first, then the others by name.
	rank := func(name string) int {
		switch name {
		case f.subjects.CallsStream():
			return 0
		case f.subjects.ResultsStream():
			return 1
		}
		return 2
	}
	slices.SortFunc(deltas, func(a, b delta) int {
		return cmp.Or(cmp.Compare(rank(a.stream), rank(b.stream)), strings.Compare(a.stream, b.stream))
	})
	prefix := strings.TrimSuffix(f.subjects.CallsStream(), "CALLS")
	by := make([]string, len(deltas))
	for i, d := range deltas {
		name := d.stream
		if short, ok := strings.CutPrefix(name, prefix); ok {
			name = strings.ToLower(short)
		}
		by[i] = fmt.Sprintf("%s %.2f", name, float64(d.n)/float64(calls))
	}
	return fmt.Sprintf("stored per call: %.2f (%s), %d messages for the %d calls made, %s",
		float64(total)/float64(calls), strings.Join(by, ", "), total, calls, made)
}
