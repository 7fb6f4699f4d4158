package main

import (
	"context"
	"fmt"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"github.com/toolfleet/toolfleet/pkg/harness"
)

func (b *bench) baselines(ctx context.Context, url string) error {
	bl := b.bl
	b.step("baseline: core request-reply")
	s, err := bl.coreRequestReply(b.p.core)
	if err != nil {
		return err
	}
	b.add(row{name: "baseline: core NATS request-reply, 256 B", s: s})
	rig, err := bl.openJS(ctx)
	if err != nil {
		return err
	}
	defer rig.close()
	b.step("baseline: JetStream round trip")
	if b.baseJS, err = rig.roundTrip(ctx, b.p.js); err != nil {
		return err
	}
	b.add(row{name: "baseline: JetStream round trip, 256 B (work queue, pull, ack, inbox reply)", s: b.baseJS})
	b.step("baseline: JetStream fan-out and gather")
	if b.baseFan, err = rig.fanOut(b.p.fan, fanout); err != nil {
		return err
	}
	b.add(row{name: fmt.Sprintf("baseline: JetStream fan-out and gather, %d × 256 B (async publish)", fanout), s: b.baseFan})
	return b.floor(ctx, bl)
}

// floor measures the durable floor (see floor.go): single calls and
// 32-call rounds with the latency phases' worker count. Its sustained rows
// are measured in the sustained phase, each just before the fleet's rows
// with the same workers, so that the two share the machine's load.
func (b *bench) floor(ctx context.Context, bl baselines) error {
	fr, err := b.openFloor(ctx, bl)
	if err != nil {
		return err
	}
	ws, err := fr.startWorkers(ctx, b.p.latencyWorkers)
	if err != nil {
		return err
	}
	wn := fmt.Sprintf("%d worker", b.p.latencyWorkers)
	b.step("durable floor: single calls and rounds")
	b.floorSingle, err = fr.latency(b.p.single, 1, floorMode{})
	if err == nil {
		b.floorRound, err = fr.latency(b.p.round, fanout, floorMode{})
	}
	if err == nil {
		b.fastRound, err = fr.latency(b.p.round, fanout, floorMode{fast: true})
	}
	if err == nil {
		b.checkedRound, err = fr.latency(b.p.round, fanout, floorMode{checked: true})
	}
	if err == nil {
		b.claimedRound, err = fr.latency(b.p.round, fanout, floorMode{checked: true, claimed: true})
	}
	ws.stop()
	if err != nil {
		return fmt.Errorf("durable floor: %w", err)
	}
	b.add(row{name: "floor: 1 call, 256 B (async publish with Msg-Id, pull worker, async result with Msg-Id, ack on PubAck, one results consumer), " + wn,
		s: b.floorSingle, ratio: ratio(b.floorSingle.p50, b.baseJS.p50) + " JS round trip"})
	b.add(row{name: fmt.Sprintf("floor: %d calls, 256 B, one async batch, %s", fanout, wn),
		s: b.floorRound, ratio: ratio(b.floorRound.p50, b.baseFan.p50) + " fan-out"})
	b.add(row{name: fmt.Sprintf("floor, fast batch: %d calls, 256 B, one fast batch (ADR-50: Msg-Id on each, gap: fail, one PubAck at the commit), %s", fanout, wn),
		s: b.fastRound, ratio: ratio(b.fastRound.p50, b.floorRound.p50) + " floor", floor: vsFloor(b.fastRound, b.floorRound)})
	b.add(row{name: fmt.Sprintf("floor with the fleet's checks: %d echo calls (arguments validated, strict envelopes, run in the harness), %s", fanout, wn),
		s: b.checkedRound, ratio: ratio(b.checkedRound.p50, b.floorRound.p50) + " floor", floor: vsFloor(b.checkedRound, b.floorRound)})
	b.add(row{name: fmt.Sprintf("floor with the fleet's checks, claimed: %d echo calls, each claimed by a start record before it runs, %s", fanout, wn),
		s: b.claimedRound, ratio: ratio(b.claimedRound.p50, b.checkedRound.p50) + " unclaimed", floor: vsFloor(b.claimedRound, b.floorRound),
		note: fmt.Sprintf("CPU per call %.2f× the floor with the fleet's checks unclaimed", float64(b.claimedRound.cpu)/float64(b.checkedRound.cpu))})
	return nil
}

// openFloor opens the floor's requester once for the run.
func (b *bench) openFloor(ctx context.Context, bl baselines) (*floorRig, error) {
	if b.floorRig != nil {
		return b.floorRig, nil
	}
	fr, err := bl.openFloor(ctx, b.log)
	if err != nil {
		return nil, err
	}
	b.floorRig = fr
	return fr, nil
}

// floorSustainedRow measures the floor's sustained calls with n workers.
func (b *bench) floorSustainedRow(ctx context.Context, n int) error {
	fr, err := b.openFloor(ctx, b.bl)
	if err != nil {
		return err
	}
	ws, err := fr.startWorkers(ctx, n)
	if err != nil {
		return err
	}
	b.step("durable floor: sustained calls, %d workers", n)
	w, err := fr.sustained(b.p.sustainConc, b.p.warm, b.p.duration, floorMode{})
	var fast, c *window
	if err == nil {
		b.step("durable floor, fast batches: sustained calls, %d workers", n)
		fast, err = fr.sustained(b.p.sustainConc, b.p.warm, b.p.duration, floorMode{fast: true})
	}
	if err == nil {
		b.step("durable floor with the fleet's checks: sustained calls, %d workers", n)
		c, err = fr.sustained(b.p.sustainConc, b.p.warm, b.p.duration, floorMode{checked: true})
	}
	ws.stop()
	if err != nil {
		return fmt.Errorf("durable floor: %w", err)
	}
	b.floorSustained[n], b.checkedSustained[n] = w, c
	b.add(row{name: fmt.Sprintf("floor: sustained calls, %d runs × %d-call rounds, %d worker(s)", b.p.sustainConc, fanout, n),
		rate: w.rate(), cpu: w.cpuPerCall(), msgs: w.msgsPerCall(), note: fmt.Sprintf("%d calls in %v", w.calls.Load(), b.p.duration)})
	b.add(row{name: fmt.Sprintf("floor, fast batch: sustained calls, %d runs × %d-call rounds, %d worker(s)", b.p.sustainConc, fanout, n),
		rate: fast.rate(), cpu: fast.cpuPerCall(), msgs: fast.msgsPerCall(), floor: vsFloorRate(fast, w), note: fmt.Sprintf("%d calls in %v", fast.calls.Load(), b.p.duration)})
	b.add(row{name: fmt.Sprintf("floor with the fleet's checks: sustained echo calls, %d runs × %d-call rounds, %d worker(s)", b.p.sustainConc, fanout, n),
		rate: c.rate(), cpu: c.cpuPerCall(), msgs: c.msgsPerCall(), floor: vsFloorRate(c, w), note: fmt.Sprintf("%d calls in %v", c.calls.Load(), b.p.duration)})
	return nil
}

func (b *bench) latency(ctx context.Context, f *fleet) (err error) {
	ws, err := f.startWorkers(ctx, b.p.latencyWorkers, 0, harness.Echo())
	if err != nil {
		return err
	}
	defer ws.stop()
	wn := fmt.Sprintf("%d worker", b.p.latencyWorkers)
	if b.want("single") {
		b.step("fleet: single echo call")
		single, err := f.dispatchLatency(ctx, b.p.single, 1)
		if err != nil {
			return fmt.Errorf("single call: %w", err)
		}
		b.add(row{name: "fleet: 1 echo call, dispatch only (Dispatcher.Publish → worker → Inbox), " + wn,
			s: single, ratio: ratio(single.p50, b.baseJS.p50) + " JS round trip", floor: vsFloor(single, b.floorSingle)})
		if b.loopSingle, err = f.loopLatency(ctx, b.p.loopSingle, 1, echoTool, echoArgs, echoText); err != nil {
			return fmt.Errorf("single call through the loop: %w", err)
		}
		b.add(row{name: "fleet: 1 echo call, full loop round (loop.Runner), " + wn,
			s: b.loopSingle, ratio: ratio(b.loopSingle.p50, b.baseJS.p50) + " JS round trip", floor: vsFloor(b.loopSingle, b.floorSingle)})
		before, err := f.stored(ctx)
		if err != nil {
			return err
		}
		if b.journalSingle, err = f.loopLatencyJournaled(ctx, b.p.loopSingle, 1, echoTool, echoArgs, echoText); err != nil {
			return fmt.Errorf("single call through a journaled loop: %w", err)
		}
		b.add(row{name: "fleet: 1 echo call, full loop round, journaled (RunDurable: one fenced append a round), " + wn,
			s: b.journalSingle, ratio: ratio(b.journalSingle.p50, b.loopSingle.p50) + " unjournaled round", floor: vsFloor(b.journalSingle, b.floorSingle),
			note: joinNotes(fmt.Sprintf("journal: +%v a round at p50", (b.journalSingle.p50-b.loopSingle.p50).Round(time.Microsecond)),
				f.storedPerCall(ctx, before, int64(b.journalSingle.calls), withWarmup))})
		oc, err := f.openClose(ctx, max(b.p.loopSingle/roundsPerRun, 10))
		if err != nil {
			return fmt.Errorf("opening inboxes: %w", err)
		}
		b.add(row{name: "fleet: open and close a run's inbox (once per run, before its first call)", s: oc})
	}
	if b.want("round") {
		if b.p.cpuProfile != "" {
			pf, err := os.Create(b.p.cpuProfile)
			if err != nil {
				return err
			}
			defer pf.Close()
			if err := pprof.StartCPUProfile(pf); err != nil {
				return err
			}
			defer pprof.StopCPUProfile()
		}
		b.step("fleet: rounds of %d echo calls", fanout)
		before, err := f.stored(ctx)
		if err != nil {
			return err
		}
		round, err := f.dispatchLatency(ctx, b.p.round, fanout)
		if err != nil {
			return fmt.Errorf("%d-call round: %w", fanout, err)
		}
		b.add(row{name: fmt.Sprintf("fleet: %d echo calls, dispatch only, %s", fanout, wn),
			s: round, ratio: ratio(round.p50, b.baseFan.p50) + " fan-out", floor: vsFloor(round, b.floorRound),
			note: f.storedPerCall(ctx, before, int64(round.calls), withWarmup)})
		if before, err = f.stored(ctx); err != nil {
			return err
		}
		if b.loopRound, err = f.loopLatency(ctx, b.p.loopRound, fanout, echoTool, echoArgs, echoText); err != nil {
			return fmt.Errorf("%d-call round through the loop: %w", fanout, err)
		}
		b.add(row{name: fmt.Sprintf("fleet: %d echo calls, full loop round, %s", fanout, wn),
			s: b.loopRound, ratio: ratio(b.loopRound.p50, b.baseFan.p50) + " fan-out", floor: vsFloor(b.loopRound, b.floorRound),
			note: f.storedPerCall(ctx, before, int64(b.loopRound.calls), withWarmup)})
		if b.p.cpuProfile != "" {
			pprof.StopCPUProfile()
		}
		if err := b.roundVariants(ctx, f, wn); err != nil {
			return err
		}
		if b.p.memProfile != "" {
			mf, err := os.Create(b.p.memProfile)
			if err != nil {
				return err
			}
			defer mf.Close()
			if err := pprof.Lookup("allocs").WriteTo(mf, 0); err != nil {
				return err
			}
		}
	}
	return nil
}

func (b *bench) sustained(ctx context.Context, f *fleet) error {
	b.sustainedLoop = map[int]*window{}
	b.floorSustained, b.checkedSustained = map[int]*window{}, map[int]*window{}
	for _, n := range b.p.workers {
		if err := b.floorSustainedRow(ctx, n); err != nil {
			return err
		}
		ws, err := f.startWorkers(ctx, n, 0, harness.Echo())
		if err != nil {
			return err
		}
		b.step("fleet: sustained echo calls, %d workers", n)
		before, err := f.stored(ctx)
		if err != nil {
			ws.stop()
			return err
		}
		pulls, pulled := ws.pulls()
		stopProfile, err := startCPUProfile(b.p.sustainedProfile, n)
		if err != nil {
			ws.stop()
			return err
		}
		w, err := f.loopSustained(ctx, b.p.sustainConc, fanout, echoTool, echoArgs, echoText, b.p.warm, b.p.duration, false)
		stopProfile()
		if err != nil {
			ws.stop()
			return err
		}
		b.sustainedLoop[n] = w
		note := joinNotes(fmt.Sprintf("%d calls in %v", w.calls.Load(), b.p.duration),
			f.storedPerCall(ctx, before, w.total.Load(), aroundWindow), ws.pullsSince(pulls, pulled))
		b.add(row{name: fmt.Sprintf("fleet: sustained echo calls, full loop, %d runs × %d-call rounds, %d worker(s)", b.p.sustainConc, fanout, n),
			rate: w.rate(), cpu: w.cpuPerCall(), msgs: w.msgsPerCall(), floor: vsFloorRate(w, b.floorSustained[n]), note: note})
		b.step("fleet: sustained echo calls, journaled runs, %d workers", n)
		if before, err = f.stored(ctx); err != nil {
			ws.stop()
			return err
		}
		jw, err := f.loopSustained(ctx, b.p.sustainConc, fanout, echoTool, echoArgs, echoText, b.p.warm, b.p.duration, true)
		if err != nil {
			ws.stop()
			return err
		}
		b.add(row{name: fmt.Sprintf("fleet: sustained echo calls, full loop, journaled runs (RunDurable), %d runs × %d-call rounds, %d worker(s)", b.p.sustainConc, fanout, n),
			rate: jw.rate(), cpu: jw.cpuPerCall(), msgs: jw.msgsPerCall(), floor: vsFloorRate(jw, b.floorSustained[n]),
			note: joinNotes(fmt.Sprintf("%d calls in %v; rate %.2f× the unjournaled loop's", jw.calls.Load(), b.p.duration, float64(jw.calls.Load())/float64(max(w.calls.Load(), 1))),
				f.storedPerCall(ctx, before, jw.total.Load(), aroundWindow))})
		d, err := f.dispatchSustained(ctx, b.p.sustainConc, b.p.warm, b.p.duration)
		ws.stop()
		if err != nil {
			return err
		}
		b.add(row{name: fmt.Sprintf("fleet: sustained echo calls, dispatch only, %d inboxes × %d-call rounds, %d worker(s)", b.p.sustainConc, fanout, n),
			rate: d.rate(), cpu: d.cpuPerCall(), msgs: d.msgsPerCall(), floor: vsFloorRate(d, b.floorSustained[n]), note: fmt.Sprintf("%d calls in %v", d.calls.Load(), b.p.duration)})
	}
	return nil
}

func (b *bench) sleepRounds(ctx context.Context, f *fleet) error {
	for _, n := range b.p.workers {
		ws, err := f.startWorkers(ctx, n, b.p.sleepConcurrency, sleeper())
		if err != nil {
			return err
		}
		b.step("fleet: rounds of %d × 20 ms calls, %d workers", fanout, n)
		s, err := f.loopLatency(ctx, b.p.sleepRounds, fanout, sleepTool, sleepArgs, "slept")
		ws.stop()
		if err != nil {
			return err
		}
		slots := n * b.p.sleepConcurrency
		waves := (fanout + slots - 1) / slots
		b.add(row{name: fmt.Sprintf("fleet: %d calls sleeping 20 ms, full loop round, %d worker(s) × %d slots", fanout, n, b.p.sleepConcurrency),
			s: s, note: fmt.Sprintf("floor %d × 20 ms = %v", waves, time.Duration(waves)*sleepFor)})
	}
	return nil
}

func (b *bench) heldRuns(ctx context.Context, f *fleet) error {
	const runWorkers = 2
	ws, err := f.startWorkers(ctx, runWorkers, 0, harness.Echo())
	if err != nil {
		return err
	}
	b.step("coordinator: %d concurrent runs, busy", b.p.runs)
	w, inUse, err := f.busyRuns(ctx, b.p.runs, b.p.warm, b.p.runsDuration)
	ws.stop()
	if err != nil {
		return err
	}
	b.add(row{name: fmt.Sprintf("coordinator: %d concurrent runs, busy (rounds of 4 echo calls), %d workers", b.p.runs, runWorkers),
		rate: w.rate(), cpu: w.cpuPerCall(), msgs: w.msgsPerCall(),
		note: fmt.Sprintf("%d calls in %v; max heap in use %s (the whole process: server, workers, coordinator, garbage)",
			w.calls.Load(), b.p.runsDuration, mib(inUse))})
	b.step("coordinator: %d concurrent runs, held", b.p.runs)
	rep, err := f.heldRuns(ctx, b.p.runs)
	if err != nil {
		return err
	}
	b.mem = &rep
	b.add(row{name: fmt.Sprintf("coordinator: %d concurrent runs, held (4 calls each waiting on a tool), %d workers", rep.runs, runWorkers),
		note: fmt.Sprintf("live heap and stacks +%s for %d runs = %s per run (idle %s, held %s; heap in use then %s); +%d goroutines",
			mib(rep.heldLive-min(rep.heldLive, rep.idleLive)), rep.runs, kib(rep.perRun), mib(rep.idleLive), mib(rep.heldLive),
			mib(rep.heldInUse), rep.goroutines)})
	return nil
}

// roundVariants measures 32-call loop rounds of the kinds the plain echo
// round leaves out: a non-idempotent tool (each call claimed before it
// runs) and a journaled run. The echo workers are running.
func (b *bench) roundVariants(ctx context.Context, f *fleet, wn string) error {
	ws, err := f.startWorkers(ctx, b.p.latencyWorkers, 0, echoOnce())
	if err != nil {
		return err
	}
	b.step("fleet: rounds of %d non-idempotent echo calls", fanout)
	before, err := f.stored(ctx)
	if err != nil {
		ws.stop()
		return err
	}
	b.onceRound, err = f.loopLatency(ctx, b.p.loopRound, fanout, echoOnceTool, echoArgs, echoText)
	ws.stop()
	if err != nil {
		return fmt.Errorf("%d-call non-idempotent round through the loop: %w", fanout, err)
	}
	b.add(row{name: fmt.Sprintf("fleet: %d non-idempotent echo calls (claimed before they run), full loop round, %s", fanout, wn),
		s: b.onceRound, ratio: ratio(b.onceRound.p50, b.loopRound.p50) + " idempotent round", floor: vsFloor(b.onceRound, b.floorRound),
		note: joinNotes(fmt.Sprintf("CPU per call %s the idempotent round's", ratio(b.onceRound.cpu, b.loopRound.cpu)),
			f.storedPerCall(ctx, before, int64(b.onceRound.calls), withWarmup))})
	b.step("fleet: journaled rounds of %d echo calls", fanout)
	if before, err = f.stored(ctx); err != nil {
		return err
	}
	if b.journalRound, err = f.loopLatencyJournaled(ctx, b.p.loopRound, fanout, echoTool, echoArgs, echoText); err != nil {
		return fmt.Errorf("%d-call journaled round through the loop: %w", fanout, err)
	}
	b.add(row{name: fmt.Sprintf("fleet: %d echo calls, full loop round, journaled (RunDurable), %s", fanout, wn),
		s: b.journalRound, ratio: ratio(b.journalRound.p50, b.loopRound.p50) + " unjournaled round", floor: vsFloor(b.journalRound, b.floorRound),
		note: f.storedPerCall(ctx, before, int64(b.journalRound.calls), withWarmup)})
	b.step("fleet: rounds of %d echo calls beside %d other coordinators", fanout, otherCoordinators)
	closeOthers, err := f.otherCoordinators(ctx, otherCoordinators)
	if err != nil {
		return fmt.Errorf("other coordinators: %w", err)
	}
	shared, err := f.loopLatency(ctx, b.p.loopRound, fanout, echoTool, echoArgs, echoText)
	closeOthers()
	if err != nil {
		return fmt.Errorf("%d-call round beside other coordinators: %w", fanout, err)
	}
	b.add(row{name: fmt.Sprintf("fleet: %d echo calls, full loop round, %d other coordinators reading the results stream, %s", fanout, otherCoordinators, wn),
		s: shared, ratio: ratio(shared.p50, b.loopRound.p50) + " alone", floor: vsFloor(shared, b.floorRound),
		note: fmt.Sprintf("CPU per call %s the round alone's (the others' consumers receive and drop every result, in this process)", ratio(shared.cpu, b.loopRound.cpu))})
	return nil
}

// otherCoordinators is how many idle coordinators share the results stream
// in the round measured beside them.
const otherCoordinators = 3

// Which calls a row's stored messages per call are divided by
// (fleet.storedPerCall).
const (
	withWarmup   = "warm-up included"
	aroundWindow = "warm-up and the runs' rounds after the window included"
)

// joinNotes joins a row's notes with "; ", leaving out empty ones.
func joinNotes(notes ...string) string {
	return strings.Join(slices.DeleteFunc(notes, func(n string) bool { return n == "" }), "; ")
}

// startCPUProfile starts a CPU profile to prefix.<n>w ("" prefix: none)
// and returns what stops it.
func startCPUProfile(prefix string, n int) (stop func(), err error) {
	if prefix == "" {
		return func() {}, nil
	}
	pf, err := os.Create(fmt.Sprintf("%s.%dw", prefix, n))
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(pf); err != nil {
		pf.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); pf.Close() }, nil
}
