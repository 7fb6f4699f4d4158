// Command fleetbench measures what toolfleet costs on top of the NATS it
// rides on. In one run, on one embedded nats-server with a TCP loopback
// listener, it measures bare NATS baselines (core request-reply, a
// JetStream work-queue round trip, a 32-message JetStream fan-out and
// gather), the durable floor (the cheapest correct JetStream design for the
// fleet's durability, written for the benchmark: see floor.go) and then the
// fleet itself (single echo calls, rounds of 32 — idempotent,
// non-idempotent and journaled —, sustained throughput with 1, 2, 4 and 8
// workers, rounds of a 20 ms tool, and a coordinator holding many
// concurrent runs), and prints one table with the fleet's ratios to the
// baselines and to the floor. Every client, baseline or fleet,
// connects over TCP to the loopback listener.
//
//	go run ./cmd/fleetbench                  # the full run, about four minutes
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
	"time"

	"github.com/rs/zerolog"
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
var phases = []string{"baseline", "single", "round", "sustained", "sleep", "runs", "mcp", "sync"}

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
	// sustainedProfile is the prefix of the CPU profiles of the fleet's
	// sustained full-loop windows, one per worker count (PREFIX.<n>w).
	sustainedProfile string
	// mutexProfile and blockProfile are written at the end of the run.
	mutexProfile, blockProfile string
	logLevel                   string
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
		workerList = fs.String("workers", "1,2,4,8", "comma-separated worker counts for the throughput and 20 ms rounds")
		runs       = fs.Int("runs", 0, "concurrent runs the coordinator holds (default 200, 20 with --short)")
		only       = fs.String("only", "", "comma-separated phases to run: "+strings.Join(phases, ", ")+" (default all)")
		cpuProfile = fs.String("cpuprofile", "", "write a CPU profile of the 32-call round phase to `FILE`")
		memProfile = fs.String("memprofile", "", "write an allocation profile to `FILE` after the 32-call round phase")
		sustProf   = fs.String("sustained-cpuprofile", "", "write a CPU profile of each fleet sustained full-loop window to `PREFIX`.<n>w (n: workers)")
		mutexProf  = fs.String("mutexprofile", "", "write a mutex contention profile of the whole run to `FILE`")
		blockProf  = fs.String("blockprofile", "", "write a blocking profile of the whole run to `FILE`")
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
	p.sustainedProfile, p.mutexProfile, p.blockProfile = *sustProf, *mutexProf, *blockProf
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
	for _, pr := range []struct{ name, file string }{{"mutex", p.mutexProfile}, {"block", p.blockProfile}} {
		if err := writeProfile(pr.name, pr.file); err != nil {
			fmt.Fprintf(stderr, "fleetbench: %v\n", err)
			return exitError
		}
	}
	return exitOK
}

// writeProfile writes the named runtime profile to file ("": none).
func writeProfile(name, file string) error {
	if file == "" {
		return nil
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if err := pprof.Lookup(name).WriteTo(f, 0); err != nil {
		f.Close()
		return fmt.Errorf("%s profile: %w", name, err)
	}
	return f.Close()
}
