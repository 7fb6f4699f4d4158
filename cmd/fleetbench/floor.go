package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"github.com/synadia-io/orbit.go/jetstreamext"

	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// The durable floor: the cheapest correct use of JetStream for the fleet's
// durability, written for the benchmark with nothing of the fleet's. Each
// call is published asynchronously into a work-queue stream with a
// Nats-Msg-Id; a pull worker (one long-lived pull sized to its free slots)
// runs the tool, publishes the result asynchronously into a results stream
// with a Nats-Msg-Id and acknowledges the call on the result's PubAck; the
// requester reads every result through one long-lived consumer for the
// whole process and hands each to its run by subject. floor_checks.go
// adds to it the checks the fleet's guarantees make every call do.
const (
	floorCallStream    = "BENCH_FLOOR_CALLS"
	floorCallSubject   = "bench.floor.call"
	floorResultStream  = "BENCH_FLOOR_RESULTS"
	floorResultPrefix  = "bench.floor.res."
	floorConsumer      = "floor"
	floorRunHeader     = "Bench-Run"
	floorCallHeader    = "Bench-Call"
	floorSlots         = 16 // a worker's slots, the fleet worker's default concurrency
	floorPullWait      = time.Second
	floorDrainDeadline = 10 * time.Second
)

// floorRig is the requester side of the floor: one connection, the two
// streams and the one results consumer, demultiplexed by run.
type floorRig struct {
	url     string
	timeout time.Duration
	nc      *nats.Conn
	js      jetstream.JetStream
	results jetstream.ConsumeContext
	seq     atomic.Uint64
	// checks and log serve the runs and workers with the fleet's checks.
	checks *floorChecks
	log    zerolog.Logger

	mu   sync.Mutex
	runs map[string]chan string // run → the call ids of its results
}

func (b baselines) openFloor(ctx context.Context, log zerolog.Logger) (*floorRig, error) {
	r := &floorRig{url: b.url, timeout: b.timeout, runs: map[string]chan string{}, log: log}
	var err error
	if r.checks, err = newFloorChecks(); err != nil {
		return nil, err
	}
	if r.nc, err = nats.Connect(b.url, nats.Name("fleetbench-floor-requester")); err != nil {
		return nil, err
	}
	if r.js, err = jetstream.New(r.nc); err != nil {
		r.close()
		return nil, err
	}
	for _, cfg := range []jetstream.StreamConfig{
		// AllowBatchPublish admits fast batches (floor_fast.go); the
		// asynchronous publishes of the other rows are unchanged by it.
		{Name: floorCallStream, Subjects: []string{floorCallSubject}, Retention: jetstream.WorkQueuePolicy,
			Storage: jetstream.FileStorage, Duplicates: 2 * time.Minute, AllowBatchPublish: true},
		{Name: floorResultStream, Subjects: []string{floorResultPrefix + ">"}, Retention: jetstream.LimitsPolicy,
			Storage: jetstream.FileStorage, Duplicates: 2 * time.Minute, MaxAge: 10 * time.Minute},
		floorStartsConfig,
	} {
		if _, err := r.js.CreateOrUpdateStream(ctx, cfg); err != nil {
			r.close()
			return nil, fmt.Errorf("floor stream %s: %w", cfg.Name, err)
		}
	}
	cons, err := r.js.OrderedConsumer(ctx, floorResultStream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{floorResultPrefix + ">"},
		DeliverPolicy:  jetstream.DeliverNewPolicy,
	})
	if err != nil {
		r.close()
		return nil, fmt.Errorf("floor results consumer: %w", err)
	}
	if r.results, err = cons.Consume(r.onResult); err != nil {
		r.close()
		return nil, fmt.Errorf("floor results consumer: %w", err)
	}
	return r, nil
}

func (r *floorRig) close() {
	if r.results != nil {
		r.results.Stop()
	}
	if r.nc != nil {
		r.nc.Close()
	}
}

// onResult hands a result to its run: the call's id, or with the checks
// the call key of a result that decodes and is ok.
func (r *floorRig) onResult(m jetstream.Msg) {
	run, ok := strings.CutPrefix(m.Subject(), floorResultPrefix)
	if !ok {
		return
	}
	id := m.Headers().Get(floorCallHeader)
	if m.Headers().Get(floorCheckedHeader) != "" {
		var err error
		if id, err = r.checks.result(m.Data()); err != nil {
			return // the round misses it and fails
		}
	}
	r.mu.Lock()
	ch := r.runs[run]
	r.mu.Unlock()
	if ch == nil {
		return // a run that ended: a late duplicate
	}
	select {
	case ch <- id:
	default: // never blocks the consumer; the round then misses it and fails
	}
}

// floorRun is one run's view of the results.
type floorRun struct {
	r       *floorRig
	id      string
	results chan string
	// checked: the run's calls and results carry the fleet's checks.
	checked bool
	// fast: the run publishes a round's calls as one fast batch.
	fast bool
	// claimed: a worker claims each call before it runs it
	// (floor_claims.go).
	claimed bool
}

// floorMode is what a floor run's rounds do beyond the floor's.
type floorMode struct {
	checked bool // the fleet's checks (floor_checks.go)
	fast    bool // a round's calls as one fast batch (floor_fast.go)
	claimed bool // each call claimed by a start record before it runs (floor_claims.go)
}

func (r *floorRig) openRun(mode floorMode) *floorRun {
	id := "r" + strconv.FormatUint(r.seq.Add(1), 10)
	fr := &floorRun{r: r, id: id, results: make(chan string, 4*fanout), checked: mode.checked, fast: mode.fast, claimed: mode.claimed}
	r.mu.Lock()
	r.runs[id] = fr.results
	r.mu.Unlock()
	return fr
}

func (fr *floorRun) close() {
	fr.r.mu.Lock()
	delete(fr.r.runs, fr.id)
	fr.r.mu.Unlock()
}

// round publishes calls calls as one asynchronous batch (or, for a fast
// run, one fast batch), waits for every PubAck (the batch's commit), and
// waits for every call's result. A checked run's calls are the echo tool's
// calls with echoArgs instead of payload.
func (fr *floorRun) round(payload []byte, calls int) error {
	r := fr.r
	futures := make([]jetstream.PubAckFuture, calls)
	open := make(map[string]bool, calls)
	deadline := time.Now().Add(r.timeout)
	var fast jetstreamext.FastPublisher
	if fr.fast {
		var err error
		if fast, err = newFloorFastBatch(r.js, r.timeout); err != nil {
			return err
		}
	}
	for j := range futures {
		id := strconv.FormatUint(r.seq.Add(1), 10)
		m := nats.NewMsg(floorCallSubject)
		m.Data = payload
		m.Header.Set(jetstream.MsgIDHeader, id)
		m.Header.Set(floorRunHeader, fr.id)
		awaited := id
		if fr.checked {
			key := protocol.NewCallKey()
			data, err := r.checks.call(protocol.RunID(fr.id), key, echoArgs, deadline)
			if err != nil {
				return fmt.Errorf("floor call: %w", err)
			}
			m.Data, awaited = data, string(key)
			m.Header.Set(floorCheckedHeader, "1")
		}
		if fr.claimed {
			m.Header.Set(floorClaimHeader, "1")
		}
		open[awaited] = true
		if fast != nil {
			if err := addFast(fast, m, j == calls-1, r.timeout); err != nil {
				return err
			}
			continue
		}
		f, err := r.js.PublishMsgAsync(m)
		if err != nil {
			return fmt.Errorf("floor publish: %w", err)
		}
		futures[j] = f
	}
	timer := time.NewTimer(r.timeout)
	defer timer.Stop()
	for _, f := range futures {
		if f == nil {
			break // a fast batch: its commit was acknowledged
		}
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return fmt.Errorf("floor publish: %w", err)
		case <-timer.C:
			return errors.New("floor publish: no PubAck")
		}
	}
	for len(open) > 0 {
		select {
		case id := <-fr.results:
			delete(open, id)
		case <-timer.C:
			return fmt.Errorf("floor: %d of %d results missing", len(open), calls)
		}
	}
	return nil
}

// latency is n sequential rounds of calls calls on one run.
func (r *floorRig) latency(n, calls int, mode floorMode) (summary, error) {
	payload := make([]byte, basePayload)
	fr := r.openRun(mode)
	defer fr.close()
	var s samples
	cpu := startCPU()
	for i := range warmup(n) + n {
		start := time.Now()
		if err := fr.round(payload, calls); err != nil {
			return summary{}, err
		}
		if i >= warmup(n) {
			s.add(time.Since(start))
		}
	}
	sum := s.summary()
	sum.cpu = cpu.per((warmup(n) + n) * calls)
	sum.msgs = cpu.msgsPer((warmup(n) + n) * calls)
	return sum, nil
}

// sustained keeps conc runs busy with rounds of fanout calls until the
// window ends.
func (r *floorRig) sustained(conc int, warm, d time.Duration, mode floorMode) (*window, error) {
	w := newWindow(warm, d)
	payload := make([]byte, basePayload)
	wait := goEach(conc, func() error {
		fr := r.openRun(mode)
		defer fr.close()
		return w.repeat(fanout, func() error { return fr.round(payload, fanout) })
	})
	return w, wait()
}

// floorWorkers are n floor workers, each on its own connection.
type floorWorkers struct {
	cancel context.CancelFunc
	ws     []*floorWorker
	wg     sync.WaitGroup
}

// floorWorker pulls calls into free slots, runs the tool (echo: the result
// is the call's payload; a checked call runs in the harness), publishes the
// result asynchronously and acks the call when its PubAck arrives.
type floorWorker struct {
	h     *harness.Harness
	nc    *nats.Conn
	js    jetstream.JetStream
	cons  jetstream.Consumer
	inUse atomic.Int64
	freed chan struct{}
	acks  chan floorPending
	// claims are the calls whose start records are being stored; claimed
	// is closed when the claimer has handled the last.
	claims  chan floorClaim
	claimed chan struct{}
	// closed is closed with the connection: a PubAck no longer comes.
	closed chan struct{}
}

type floorPending struct {
	f   jetstream.PubAckFuture
	msg jetstream.Msg
}

// startWorkers starts n floor workers and waits until each holds a pull.
func (r *floorRig) startWorkers(ctx context.Context, n int) (*floorWorkers, error) {
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	fw := &floorWorkers{cancel: cancel}
	for i := range n {
		w := &floorWorker{freed: make(chan struct{}, 1), acks: make(chan floorPending, floorSlots),
			claims: make(chan floorClaim, floorSlots), claimed: make(chan struct{}), closed: make(chan struct{})}
		var err error
		if w.h, err = newFloorHarness(r.log); err != nil {
			fw.stop()
			return nil, err
		}
		if w.nc, err = nats.Connect(r.url, nats.Name(fmt.Sprintf("fleetbench-floor-worker-%d", i+1))); err != nil {
			fw.stop()
			return nil, err
		}
		fw.ws = append(fw.ws, w)
		if w.js, err = jetstream.New(w.nc); err != nil {
			fw.stop()
			return nil, err
		}
		if w.cons, err = w.js.CreateOrUpdateConsumer(ctx, floorCallStream, jetstream.ConsumerConfig{
			Durable: floorConsumer, AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: -1,
		}); err != nil {
			fw.stop()
			return nil, fmt.Errorf("floor consumer: %w", err)
		}
		fw.wg.Go(func() { w.pull(wctx) })
		fw.wg.Go(w.claimer)
		fw.wg.Go(w.acker)
	}
	cons, err := r.js.Consumer(ctx, floorCallStream, floorConsumer)
	if err != nil {
		fw.stop()
		return nil, err
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if info, err := cons.Info(ctx); err == nil && info.NumWaiting >= n {
			return fw, nil
		}
		if time.Now().After(deadline) {
			fw.stop()
			return nil, fmt.Errorf("%d floor workers not pulling within 10s", n)
		}
		time.Sleep(5 * time.Millisecond) // polling the server, not synchronising
	}
}

// stop ends the pulls, lets every result's PubAck settle its call, and
// closes the connections.
func (fw *floorWorkers) stop() {
	fw.cancel()
	for _, w := range fw.ws {
		deadline := time.Now().Add(floorDrainDeadline)
		for w.inUse.Load() > 0 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond) // polling the worker's slots, not synchronising
		}
		if w.nc != nil {
			w.nc.Flush()
			w.nc.Close() // ends the pull under way
		}
		close(w.closed)
	}
	fw.wg.Wait()
}

// pull keeps one pull open, asking for as many calls as there are free
// slots, and runs each call as it arrives (a claimed call once its start
// record is stored).
func (w *floorWorker) pull(ctx context.Context) {
	defer func() {
		close(w.claims)
		<-w.claimed
		close(w.acks)
	}()
	for ctx.Err() == nil {
		free := floorSlots - int(w.inUse.Load())
		if free <= 0 {
			select {
			case <-w.freed:
				continue
			case <-ctx.Done():
				return
			}
		}
		batch, err := w.cons.Fetch(free, jetstream.FetchMaxWait(floorPullWait))
		if err != nil {
			if ctx.Err() != nil || w.nc.IsClosed() {
				return
			}
			time.Sleep(10 * time.Millisecond) // a failed pull: back off
			continue
		}
		for m := range batch.Messages() {
			w.inUse.Add(1)
			if m.Headers().Get(floorClaimHeader) == "" {
				w.answer(m, true)
				continue
			}
			if err := w.claim(m); err != nil {
				m.Nak()
				w.release()
			}
		}
	}
}

// answer runs the call m carries and publishes its result; ack: the call
// is acknowledged once the result is stored (a claimed call was already).
func (w *floorWorker) answer(m jetstream.Msg, ack bool) {
	res := nats.NewMsg(floorResultPrefix + m.Headers().Get(floorRunHeader))
	res.Data = m.Data()
	if m.Headers().Get(floorCheckedHeader) != "" {
		var err error
		if res.Data, err = runChecked(context.Background(), w.h, m.Data()); err != nil {
			if ack {
				m.Term()
			}
			w.release()
			return
		}
		res.Header.Set(floorCheckedHeader, "1")
	}
	id := m.Headers().Get(jetstream.MsgIDHeader)
	res.Header.Set(jetstream.MsgIDHeader, "r"+id)
	res.Header.Set(floorCallHeader, id)
	f, err := w.js.PublishMsgAsync(res)
	if err != nil {
		if ack {
			m.Nak()
		}
		w.release()
		return
	}
	if !ack {
		m = nil
	}
	w.acks <- floorPending{f: f, msg: m}
}

// acker acknowledges each call once its result is stored.
func (w *floorWorker) acker() {
	for p := range w.acks {
		select {
		case <-p.f.Ok():
			if p.msg != nil {
				p.msg.Ack()
			}
		case <-p.f.Err():
			if p.msg != nil {
				p.msg.Nak()
			}
		case <-w.closed:
		}
		w.release()
	}
}

func (w *floorWorker) release() {
	w.inUse.Add(-1)
	select {
	case w.freed <- struct{}{}:
	default:
	}
}
