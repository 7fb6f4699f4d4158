// Command fleetbench measures what toolfleet costs on top of the NATS it
// rides on. In one run, on one embedded nats-server with a TCP loopback
// listener, it measures bare NATS baselines (core request-reply, a
// JetStream work-queue round trip, a 32-message JetStream fan-out and
// gather), the durable floor (the cheapest correct JetStream design for the
// fleet's durability, written for the benchmark: see floor.go) and then the
// fleet itself (single echo calls, rounds of 32 — idempotent,
// non-idempotent and journaled —, sustained throughput with 1, 2 and 4
// workers, rounds of a 20 ms tool, and a coordinator holding many
// concurrent runs), and prints one table with the fleet's ratios to the
// baselines and to the floor. Every client, baseline or fleet,
// connects over TCP to the loopback listener.
//
//	go run ./cmd/fleetbench                  # the full run, under two minutes
//	go run ./cmd/fleetbench --short          # a few seconds, for CI
//	go run ./cmd/fleetbench --only round --cpuprofile cpu.out --memprofile mem.out
//
// Numbers from a shared or busy machine are noisy; the table prints the
// load average next to them. fleetbench asserts nothing about timing.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/internal/embedded"
	"github.com/toolfleet/toolfleet/pkg/harness"
)

// Exit statuses.
const (
	exitOK     = 0
	exitError  = 1
	exitConfig = 2
)

// fanout is the number of calls in a round.
const fanout = 32

// Phases that --only selects.
var phases = []string{"baseline", "single", "round", "sustained", "sleep", "runs", "mcp"}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// plan is how much of each measure a run takes.
type plan struct {
	cluster                int // nodes of the replicated phase; 0: none
	core, js, fan          int // baseline iterations
	single, loopSingle     int // single-call iterations (dispatch, loop rounds)
	round, loopRound       int // 32-call rounds (dispatch, loop)
	sleepRounds            int // 32-call rounds of the sleeping tool per worker count
	duration, warm         time.Duration
	runs                   int
	runsDuration           time.Duration
	sustainConc            int // concurrent runs or inboxes in the sustained phases
	latencyWorkers         int
	sleepConcurrency       int
	workers                []int
	only                   map[string]bool
	cpuProfile, memProfile string
	logLevel               string
}

func defaultPlan(short bool) plan {
	if short {
		return plan{core: 50, js: 50, fan: 10, single: 50, loopSingle: 14, round: 10, loopRound: 14,
			sleepRounds: 7, duration: 300 * time.Millisecond, warm: 100 * time.Millisecond,
			runs: 20, runsDuration: time.Second}
	}
	return plan{core: 5000, js: 3000, fan: 300, single: 3000, loopSingle: 1400, round: 300, loopRound: 301,
		sleepRounds: 35, duration: 5 * time.Second, warm: 500 * time.Millisecond,
		runs: 200, runsDuration: 10 * time.Second}
}

// run is the whole program; it returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("fleetbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		short      = fs.Bool("short", false, "a run of a few seconds (for CI); numbers are not meaningful")
		duration   = fs.Duration("duration", 0, "length of each throughput measurement (default 5s, 300ms with --short)")
		workerList = fs.String("workers", "1,2,4", "comma-separated worker counts for the throughput and 20 ms rounds")
		runs       = fs.Int("runs", 0, "concurrent runs the coordinator holds (default 200, 20 with --short)")
		only       = fs.String("only", "", "comma-separated phases to run: "+strings.Join(phases, ", ")+" (default all)")
		cpuProfile = fs.String("cpuprofile", "", "write a CPU profile of the 32-call round phase to `FILE`")
		memProfile = fs.String("memprofile", "", "write an allocation profile to `FILE` after the 32-call round phase")
		cluster    = fs.Int("cluster", 0, "also measure the loop rounds and sustained calls on a JetStream cluster of this many nodes (3) with every stream replicated on each, beside the single server's rows (0: off)")
		logLevel   = fs.String("log-level", "info", "level of the fleet's logs, which go to "+os.DevNull+": debug, info, warn, error or disabled")
	)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: fleetbench [flags]\n\nMeasures the fleet against bare NATS on one embedded server.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitConfig
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "fleetbench: unexpected argument %q\n", fs.Arg(0))
		return exitConfig
	}
	if *cluster != 0 && *cluster != 3 {
		fmt.Fprintln(stderr, "fleetbench: --cluster: must be 0 or 3")
		return exitConfig
	}
	p := defaultPlan(*short)
	p.cluster = *cluster
	p.latencyWorkers, p.sleepConcurrency, p.sustainConc = 1, 8, 8
	p.cpuProfile, p.memProfile, p.logLevel = *cpuProfile, *memProfile, *logLevel
	if *duration < 0 || (*duration > 0 && *duration < 100*time.Millisecond) {
		fmt.Fprintln(stderr, "fleetbench: --duration: must be >= 100ms")
		return exitConfig
	}
	if *duration > 0 {
		p.duration = *duration
	}
	if *runs < 0 || *runs > 100_000 {
		fmt.Fprintln(stderr, "fleetbench: --runs: must be 1..100000")
		return exitConfig
	}
	if *runs > 0 {
		p.runs = *runs
	}
	for _, w := range strings.Split(*workerList, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(w))
		if err != nil || n < 1 || n > 64 {
			fmt.Fprintf(stderr, "fleetbench: --workers: %q is not a worker count 1..64\n", w)
			return exitConfig
		}
		p.workers = append(p.workers, n)
	}
	p.only = map[string]bool{}
	for _, ph := range strings.Split(*only, ",") {
		if ph = strings.TrimSpace(ph); ph == "" {
			continue
		}
		if !slices.Contains(phases, ph) {
			fmt.Fprintf(stderr, "fleetbench: --only: unknown phase %q (want %s)\n", ph, strings.Join(phases, ", "))
			return exitConfig
		}
		p.only[ph] = true
	}
	devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		fmt.Fprintf(stderr, "fleetbench: %v\n", err)
		return exitError
	}
	defer devnull.Close()
	// JSON lines, one write(2) each, as the commands log to a file; not
	// logging.New, which takes the character device for a terminal.
	lvl, err := zerolog.ParseLevel(p.logLevel)
	if err != nil || lvl == zerolog.NoLevel {
		fmt.Fprintf(stderr, "fleetbench: --log-level: unknown level %q\n", p.logLevel)
		return exitConfig
	}
	log := zerolog.New(devnull).Level(lvl).With().Timestamp().Str("svc", "fleetbench").Logger()
	if p.memProfile != "" {
		runtime.MemProfileRate = 16 << 10
	}
	b := &bench{p: p, log: log, out: stdout, progress: stderr, short: *short, loadStart: loadAvg()}
	if err := b.run(ctx); err != nil {
		fmt.Fprintf(stderr, "fleetbench: %v\n", err)
		return exitError
	}
	return exitOK
}

// row is one line of the table.
type row struct {
	name  string
	s     summary
	cpu   time.Duration // process CPU time per call or message
	msgs  float64       // the server's messages per call or message
	rate  string
	ratio string
	// floor is the row's ratio to the durable floor's row of the same
	// shape, measured in the same run.
	floor string
	note  string
}

type bench struct {
	p        plan
	log      zerolog.Logger
	out      io.Writer
	progress io.Writer
	short    bool
	rows     []row
	// loadStart is the load average when the run started.
	loadStart string

	// Figures the ratios and targets refer to.
	baseJS, baseFan         summary
	floorSingle, floorRound summary
	floorSustained          map[int]*window
	// checkedRound and checkedSustained are the floor with the fleet's
	// checks (floor_checks.go).
	checkedRound     summary
	checkedSustained map[int]*window
	// bl and floorRig are the baselines' settings and the floor's
	// requester, open for the whole run once a phase needs it.
	bl                            baselines
	floorRig                      *floorRig
	single, loopSingle            summary
	round, loopRound              summary
	sustain2Loop, sustain2Disp    string
	mem                           *memReport
	sustainedLoop, sustainedDispN map[int]string
	sustainedLoopW                map[int]*window
	onceRound                     summary
}

func (b *bench) want(phase string) bool { return len(b.p.only) == 0 || b.p.only[phase] }

func (b *bench) step(format string, a ...any) {
	fmt.Fprintf(b.progress, "fleetbench: "+format+"\n", a...)
}

func (b *bench) add(r row) { b.rows = append(b.rows, r) }

func (b *bench) run(ctx context.Context) error {
	dir, err := os.MkdirTemp("", "fleetbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	srv, err := embedded.Start(embedded.Config{StoreDir: dir, Listen: true})
	if err != nil {
		return err
	}
	defer srv.Shutdown()
	serverMsgs = func() int64 {
		v, err := srv.NATSServer().Varz(nil)
		if err != nil {
			return 0
		}
		return v.InMsgs + v.OutMsgs
	}
	defer func() { serverMsgs = nil }()
	url := srv.ClientURL()
	b.bl = baselines{url: url, timeout: callTimeout}
	if b.short {
		b.bl.timeout = shortCallTimeout
	}
	defer func() {
		if b.floorRig != nil {
			b.floorRig.close()
		}
	}()

	if b.want("baseline") {
		if err := b.baselines(ctx, url); err != nil {
			return fmt.Errorf("baselines: %w", err)
		}
	}
	f, err := openFleet(ctx, url, b.log, b.short, 1)
	if err != nil {
		return fmt.Errorf("fleet: %w", err)
	}
	defer f.close()
	if b.want("single") || b.want("round") {
		if err := b.latency(ctx, f); err != nil {
			return err
		}
	}
	if b.want("sustained") {
		if err := b.sustained(ctx, f); err != nil {
			return fmt.Errorf("sustained: %w", err)
		}
	}
	if b.want("sleep") {
		if err := b.sleepRounds(ctx, f); err != nil {
			return fmt.Errorf("20 ms rounds: %w", err)
		}
	}
	if b.want("runs") {
		if err := b.heldRuns(ctx, f); err != nil {
			return fmt.Errorf("concurrent runs: %w", err)
		}
	}
	if b.want("mcp") {
		if err := b.mcp(ctx, f); err != nil {
			return fmt.Errorf("mcp: %w", err)
		}
	}
	if b.p.cluster > 0 {
		if err := b.replicated(ctx, dir); err != nil {
			return fmt.Errorf("cluster: %w", err)
		}
	}
	b.print(url)
	return nil
}

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
	b.floorSingle, err = fr.latency(b.p.single, 1, false)
	if err == nil {
		b.floorRound, err = fr.latency(b.p.round, fanout, false)
	}
	if err == nil {
		b.checkedRound, err = fr.latency(b.p.round, fanout, true)
	}
	ws.stop()
	if err != nil {
		return fmt.Errorf("durable floor: %w", err)
	}
	b.add(row{name: "floor: 1 call, 256 B (async publish with Msg-Id, pull worker, async result with Msg-Id, ack on PubAck, one results consumer), " + wn,
		s: b.floorSingle, ratio: ratio(b.floorSingle.p50, b.baseJS.p50) + " JS round trip"})
	b.add(row{name: fmt.Sprintf("floor: %d calls, 256 B, one async batch, %s", fanout, wn),
		s: b.floorRound, ratio: ratio(b.floorRound.p50, b.baseFan.p50) + " fan-out"})
	b.add(row{name: fmt.Sprintf("floor with the fleet's checks: %d echo calls (arguments validated, strict envelopes, run in the harness), %s", fanout, wn),
		s: b.checkedRound, ratio: ratio(b.checkedRound.p50, b.floorRound.p50) + " floor", floor: vsFloor(b.checkedRound, b.floorRound)})
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
	w, err := fr.sustained(b.p.sustainConc, b.p.warm, b.p.duration, false)
	var c *window
	if err == nil {
		b.step("durable floor with the fleet's checks: sustained calls, %d workers", n)
		c, err = fr.sustained(b.p.sustainConc, b.p.warm, b.p.duration, true)
	}
	ws.stop()
	if err != nil {
		return fmt.Errorf("durable floor: %w", err)
	}
	b.floorSustained[n], b.checkedSustained[n] = w, c
	b.add(row{name: fmt.Sprintf("floor: sustained calls, %d runs × %d-call rounds, %d worker(s)", b.p.sustainConc, fanout, n),
		rate: w.rate(), cpu: w.cpuPerCall(), msgs: w.msgsPerCall(), note: fmt.Sprintf("%d calls in %v", w.calls.Load(), b.p.duration)})
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
		if b.single, err = f.dispatchLatency(ctx, b.p.single, 1); err != nil {
			return fmt.Errorf("single call: %w", err)
		}
		b.add(row{name: "fleet: 1 echo call, dispatch only (Dispatcher.Publish → worker → Inbox), " + wn,
			s: b.single, ratio: ratio(b.single.p50, b.baseJS.p50) + " JS round trip", floor: vsFloor(b.single, b.floorSingle)})
		if b.loopSingle, err = f.loopLatency(ctx, b.p.loopSingle, 1, echoTool, echoArgs, echoText); err != nil {
			return fmt.Errorf("single call through the loop: %w", err)
		}
		b.add(row{name: "fleet: 1 echo call, full loop round (loop.Runner), " + wn,
			s: b.loopSingle, ratio: ratio(b.loopSingle.p50, b.baseJS.p50) + " JS round trip", floor: vsFloor(b.loopSingle, b.floorSingle)})
		journaled, err := f.loopLatencyJournaled(ctx, b.p.loopSingle, 1, echoTool, echoArgs, echoText)
		if err != nil {
			return fmt.Errorf("single call through a journaled loop: %w", err)
		}
		b.add(row{name: "fleet: 1 echo call, full loop round, journaled (RunDurable: 5 fenced appends a round), " + wn,
			s: journaled, ratio: ratio(journaled.p50, b.loopSingle.p50) + " unjournaled round", floor: vsFloor(journaled, b.floorSingle),
			note: fmt.Sprintf("journal: +%v a round at p50", (journaled.p50 - b.loopSingle.p50).Round(time.Microsecond))})
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
		if b.round, err = f.dispatchLatency(ctx, b.p.round, fanout); err != nil {
			return fmt.Errorf("%d-call round: %w", fanout, err)
		}
		b.add(row{name: fmt.Sprintf("fleet: %d echo calls, dispatch only, %s", fanout, wn),
			s: b.round, ratio: ratio(b.round.p50, b.baseFan.p50) + " fan-out", floor: vsFloor(b.round, b.floorRound),
			note: f.resultsPerCall(ctx, before)})
		if before, err = f.stored(ctx); err != nil {
			return err
		}
		if b.loopRound, err = f.loopLatency(ctx, b.p.loopRound, fanout, echoTool, echoArgs, echoText); err != nil {
			return fmt.Errorf("%d-call round through the loop: %w", fanout, err)
		}
		b.add(row{name: fmt.Sprintf("fleet: %d echo calls, full loop round, %s", fanout, wn),
			s: b.loopRound, ratio: ratio(b.loopRound.p50, b.baseFan.p50) + " fan-out", floor: vsFloor(b.loopRound, b.floorRound),
			note: f.resultsPerCall(ctx, before)})
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
	b.sustainedLoop, b.sustainedDispN, b.sustainedLoopW = map[int]string{}, map[int]string{}, map[int]*window{}
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
		w, err := f.loopSustained(ctx, b.p.sustainConc, fanout, echoTool, echoArgs, echoText, b.p.warm, b.p.duration)
		if err != nil {
			ws.stop()
			return err
		}
		b.sustainedLoop[n], b.sustainedLoopW[n] = w.rate(), w
		note := fmt.Sprintf("%d calls in %v", w.calls.Load(), b.p.duration)
		if per := f.resultsPerCall(ctx, before); per != "" {
			note += "; " + per
		}
		b.add(row{name: fmt.Sprintf("fleet: sustained echo calls, full loop, %d runs × %d-call rounds, %d worker(s)", b.p.sustainConc, fanout, n),
			rate: w.rate(), cpu: w.cpuPerCall(), msgs: w.msgsPerCall(), floor: vsFloorRate(w, b.floorSustained[n]), note: note})
		d, err := f.dispatchSustained(ctx, b.p.sustainConc, b.p.warm, b.p.duration)
		ws.stop()
		if err != nil {
			return err
		}
		b.sustainedDispN[n] = d.rate()
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

func (b *bench) print(url string) {
	w := b.out
	mode := "default"
	if b.short {
		mode = "--short (numbers not meaningful)"
	}
	fmt.Fprintf(w, "fleetbench: toolfleet against bare NATS, one embedded nats-server %s, every client over TCP loopback (%s)\n", server.VERSION, url)
	fmt.Fprintf(w, "machine: %d cores, GOMAXPROCS %d, %s %s/%s, CPU %q, load average %s at the start, %s at the end\n",
		runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.Version(), runtime.GOOS, runtime.GOARCH, cpuModel(), b.loadStart, loadAvg())
	fmt.Fprintf(w, "mode: %s; throughput windows %v; fleet logs at %s to %s; server, workers and coordinator share this process\n\n",
		mode, b.p.duration, b.p.logLevel, os.DevNull)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight|tabwriter.Debug)
	fmt.Fprintln(tw, "measure\tn\tp50\tp99\tmean\tthroughput\tCPU/call\tmsgs/call\tp50 ratio\tvs durable floor\t")
	for _, r := range b.rows {
		n := "-"
		if r.s.n > 0 {
			n = strconv.Itoa(r.s.n)
		}
		rt := r.rate
		if rt == "" {
			rt = "-"
		}
		ra := r.ratio
		if ra == "" || strings.HasPrefix(ra, "-") {
			ra = "-"
		}
		if r.cpu == 0 {
			r.cpu = r.s.cpu
		}
		if r.msgs == 0 {
			r.msgs = r.s.msgs
		}
		msgs := "-"
		if r.msgs > 0 {
			msgs = strconv.FormatFloat(r.msgs, 'f', 1, 64)
		}
		fl := r.floor
		if fl == "" {
			fl = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", r.name, n, dur(r.s.p50), dur(r.s.p99), dur(r.s.mean), rt, dur(r.cpu), msgs, ra, fl)
	}
	tw.Flush()
	notes := false
	for _, r := range b.rows {
		if r.note != "" {
			if !notes {
				fmt.Fprintln(w, "\nnotes:")
				notes = true
			}
			fmt.Fprintf(w, "  %s: %s\n", r.name, r.note)
		}
	}
	b.printTargets(w)
}

// printTargets reports the data path's targets against what was measured:
// the fleet's full loop round and sustained calls against the durable
// floor of the same run, the non-idempotent round against the idempotent
// one, and the memory of held runs.
func (b *bench) printTargets(w io.Writer) {
	fmt.Fprintln(w, "\ntargets:")
	verdict := func(ok bool) string {
		if ok {
			return "met"
		}
		return "NOT met"
	}
	if b.loopRound.n > 0 && b.floorRound.n > 0 && b.floorRound.cpu > 0 {
		c := float64(b.loopRound.cpu) / float64(b.floorRound.cpu)
		fmt.Fprintf(w, "  32-call round CPU per call ≤ 1.2 × the durable floor: %.2f× (%v against %v): %s\n",
			c, b.loopRound.cpu, b.floorRound.cpu, verdict(c <= 1.2))
		r := float64(b.loopRound.p50) / float64(b.floorRound.p50)
		fmt.Fprintf(w, "  32-call round p50 ≤ 1.3 × the durable floor: %.2f× (full loop round; dispatch only %s): %s\n",
			r, ratio(b.round.p50, b.floorRound.p50), verdict(r <= 1.3))
	}
	if fl := b.floorSustained[2]; fl != nil && fl.calls.Load() > 0 {
		if loop, ok := b.sustainedLoopW[2]; ok {
			r := float64(loop.calls.Load()) / float64(fl.calls.Load())
			fmt.Fprintf(w, "  sustained echo calls/s with 2 workers ≥ 0.9 × the durable floor: %.2f× (%s full loop against %s): %s\n",
				r, loop.rate(), fl.rate(), verdict(r >= 0.9))
		}
	}
	if b.loopRound.n > 0 && b.checkedRound.n > 0 && b.checkedRound.cpu > 0 && b.floorRound.cpu > 0 {
		fmt.Fprintf(w, "  (the floor with the fleet's checks: %.2f× the floor's CPU per call, %s its round p50; the fleet's full loop round against it: %.2f× CPU per call, %s p50)\n",
			float64(b.checkedRound.cpu)/float64(b.floorRound.cpu), ratio(b.checkedRound.p50, b.floorRound.p50),
			float64(b.loopRound.cpu)/float64(b.checkedRound.cpu), ratio(b.loopRound.p50, b.checkedRound.p50))
	}
	if c := b.checkedSustained[2]; c != nil && c.calls.Load() > 0 {
		if loop, ok := b.sustainedLoopW[2]; ok {
			fmt.Fprintf(w, "  (sustained with 2 workers, the fleet's full loop against the floor with the fleet's checks: %.2f×, %s against %s)\n",
				float64(loop.calls.Load())/float64(c.calls.Load()), loop.rate(), c.rate())
		}
	}
	if b.onceRound.n > 0 && b.loopRound.n > 0 {
		r := float64(b.onceRound.cpu) / float64(b.loopRound.cpu)
		fmt.Fprintf(w, "  a non-idempotent call ≤ 1.5 × an idempotent one: %.2f× CPU per call, %s round p50: %s\n",
			r, ratio(b.onceRound.p50, b.loopRound.p50), verdict(r <= 1.5))
	}
	if b.mem != nil {
		held := b.mem.heldLive - min(b.mem.heldLive, b.mem.idleLive)
		v := verdict(b.mem.perRun < 100<<10)
		if b.mem.runs < 200 {
			v = "not measured at 200 runs"
		}
		fmt.Fprintf(w, "  200 held runs under 100 KiB each: %d runs held %s of live heap and stacks (%s per run; the whole process's heap in use then: %s): %s\n",
			b.mem.runs, mib(held), kib(b.mem.perRun), mib(b.mem.heldInUse), v)
	}
}

// cpuModel is the first "model name" of /proc/cpuinfo, or "unknown".
func cpuModel() string {
	data, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	for _, line := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

// loadAvg is the 1, 5 and 15 minute load average of /proc/loadavg, or
// "unknown".
func loadAvg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
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
	b.onceRound, err = f.loopLatency(ctx, b.p.loopRound, fanout, echoOnceTool, echoArgs, echoText)
	ws.stop()
	if err != nil {
		return fmt.Errorf("%d-call non-idempotent round through the loop: %w", fanout, err)
	}
	b.add(row{name: fmt.Sprintf("fleet: %d non-idempotent echo calls (claimed before they run), full loop round, %s", fanout, wn),
		s: b.onceRound, ratio: ratio(b.onceRound.p50, b.loopRound.p50) + " idempotent round", floor: vsFloor(b.onceRound, b.floorRound),
		note: fmt.Sprintf("CPU per call %s the idempotent round's", ratio(b.onceRound.cpu, b.loopRound.cpu))})
	b.step("fleet: journaled rounds of %d echo calls", fanout)
	journaled, err := f.loopLatencyJournaled(ctx, b.p.loopRound, fanout, echoTool, echoArgs, echoText)
	if err != nil {
		return fmt.Errorf("%d-call journaled round through the loop: %w", fanout, err)
	}
	b.add(row{name: fmt.Sprintf("fleet: %d echo calls, full loop round, journaled (RunDurable), %s", fanout, wn),
		s: journaled, ratio: ratio(journaled.p50, b.loopRound.p50) + " unjournaled round", floor: vsFloor(journaled, b.floorRound)})
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

// vsFloor is a latency row's ratios to the floor's row of the same shape.
func vsFloor(s, floor summary) string {
	if s.n == 0 || floor.n == 0 {
		return ""
	}
	return fmt.Sprintf("p50 %s p99 %s CPU %s", ratio(s.p50, floor.p50), ratio(s.p99, floor.p99), ratio(s.cpu, floor.cpu))
}

// vsFloorRate is a throughput row's ratios to the floor's with the same
// workers.
func vsFloorRate(w, floor *window) string {
	if w == nil || floor == nil || floor.calls.Load() == 0 {
		return ""
	}
	return fmt.Sprintf("rate %.2f× CPU %s", float64(w.calls.Load())/float64(floor.calls.Load()), ratio(w.cpuPerCall(), floor.cpuPerCall()))
}
