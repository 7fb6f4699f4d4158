// Command peersbench runs fleetbench's round shapes on the durable-execution
// systems users would pick instead of toolfleet — DBOS Transact Go on
// PostgreSQL and the Temporal dev server with the Go SDK — and prints rows
// that run.sh sets beside fleetbench's.
//
// The work, on each system: a durable workflow (a run of an agent) does a
// model step (a durable step returning a fixed response), then rounds of N
// echo calls, each a durable step (DBOS) or activity (Temporal), run
// concurrently, each round ending with the next model step. Rows:
//
//   - round1, round32: runs of 7 rounds of 1 or 32 calls, one run at a time;
//     the p50 and p99 of the round latency (from the model step's return to
//     the next model step's start) and the CPU per call;
//   - sustained: 8 concurrent runs doing back-to-back rounds of 32 calls;
//     calls gathered per second and the CPU per call.
//
// CPU is summed over every process involved: this one (getrusage) and the
// process trees named by --pids (the PostgreSQL postmaster and its backends,
// or the Temporal server), read from /proc before and after each series.
//
//	peersbench dbos --url postgres://... --pids 1234 --config "fsync on"
//	peersbench temporal --address 127.0.0.1:7233 --pids 5678
//	peersbench table results/
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// peer runs one durable workflow of the shape above to its end.
type peer interface {
	run(ctx context.Context, id string, n, rounds int) error
	close()
}

// options are the flags every system shares.
type options struct {
	system    string
	config    string
	guarantee string
	pids      []int
	runs1     int
	runs32    int
	rounds    int
	workflows int
	duration  time.Duration
	warmup    time.Duration
}

func main() {
	if len(os.Args) < 2 {
		usage(os.Stderr)
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "dbos", "temporal":
		err = bench(os.Args[1], os.Args[2:])
	case "table":
		err = table(os.Args[2:], os.Stdout)
	case "freeport":
		err = freePort()
	default:
		usage(os.Stderr)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "peersbench:", err)
		os.Exit(1)
	}
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: peersbench dbos|temporal [flags]  |  peersbench table RESULTS-DIR  |  peersbench freeport")
}

func bench(system string, args []string) error {
	fs := flag.NewFlagSet(system, flag.ContinueOnError)
	o := options{system: system}
	var pids string
	url := fs.String("url", "", "dbos: the PostgreSQL URL of the system database")
	address := fs.String("address", "127.0.0.1:7233", "temporal: the frontend's host:port")
	fs.StringVar(&o.config, "config", "", "the configuration, as the table prints it")
	fs.StringVar(&o.guarantee, "guarantee", "", "the guarantee in that configuration, as the table prints it")
	fs.StringVar(&pids, "pids", "", "comma-separated pids whose process trees' CPU is counted (the database or server)")
	fs.IntVar(&o.runs1, "runs1", 30, "runs of 1-call rounds")
	fs.IntVar(&o.runs32, "runs32", 10, "runs of 32-call rounds")
	fs.IntVar(&o.rounds, "rounds", 7, "rounds per run (fleetbench's loop runs 7)")
	fs.IntVar(&o.workflows, "workflows", 8, "concurrent runs in the sustained phase")
	fs.DurationVar(&o.duration, "duration", 5*time.Second, "the sustained phase's measured window")
	fs.DurationVar(&o.warmup, "warmup", time.Second, "the sustained phase's warm-up before the window")
	if err := fs.Parse(args); err != nil {
		return err
	}
	for _, s := range strings.Split(pids, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		pid, err := strconv.Atoi(s)
		if err != nil {
			return fmt.Errorf("--pids: %v", err)
		}
		o.pids = append(o.pids, pid)
	}
	ctx := context.Background()
	var p peer
	var err error
	switch system {
	case "dbos":
		p, err = newDBOS(ctx, *url)
	case "temporal":
		p, err = newTemporal(ctx, *address)
	}
	if err != nil {
		return err
	}
	defer p.close()
	fmt.Fprintf(os.Stderr, "peersbench %s (%s): load average %s at the start\n", system, o.config, loadAverage())
	meter := cpuMeter{roots: o.pids}
	for _, shape := range []struct{ n, runs int }{{1, o.runs1}, {32, o.runs32}} {
		if err := series(ctx, p, o, meter, shape.n, shape.runs); err != nil {
			return err
		}
	}
	if err := sustained(ctx, p, o, meter); err != nil {
		return err
	}
	if len(o.pids) > 0 {
		// What the database or server spends doing nothing, for reading
		// the CPU per call of the slower rows.
		idle := cpuMeter{roots: o.pids, serverOnly: true}
		before, err := idle.read()
		if err != nil {
			return err
		}
		time.Sleep(2 * time.Second)
		after, err := idle.read()
		if err != nil {
			return err
		}
		row{system: o.system, config: o.config, measure: "idle", cpuPerCall: (after - before) / 2}.print(os.Stdout)
	}
	fmt.Fprintf(os.Stderr, "peersbench %s (%s): load average %s at the end\n", system, o.config, loadAverage())
	return nil
}

var runSeq atomic.Int64

func runID(system string, n int) string {
	return fmt.Sprintf("peers-%s-%d-%d-%d", system, n, os.Getpid(), runSeq.Add(1))
}

// series runs one run (warm-up, not counted) and then `runs` runs one at a
// time, each of o.rounds rounds of n calls.
func series(ctx context.Context, p peer, o options, meter cpuMeter, n, runs int) error {
	if err := p.run(ctx, runID(o.system, n), n, o.rounds); err != nil {
		return fmt.Errorf("warm-up run of %d-call rounds: %w", n, err)
	}
	recorder.forgetAll()
	before, err := meter.read()
	if err != nil {
		return err
	}
	ids := make([]string, 0, runs)
	for range runs {
		id := runID(o.system, n)
		if err := p.run(ctx, id, n, o.rounds); err != nil {
			return fmt.Errorf("run of %d-call rounds: %w", n, err)
		}
		ids = append(ids, id)
	}
	after, err := meter.read()
	if err != nil {
		return err
	}
	lat := recorder.rounds(ids)
	calls := len(lat) * n
	if calls == 0 {
		return fmt.Errorf("%d-call rounds: no round measured", n)
	}
	row{
		system: o.system, config: o.config, guarantee: o.guarantee,
		measure: fmt.Sprintf("round%d", n), n: len(lat),
		p50: percentile(lat, 0.50), p99: percentile(lat, 0.99),
		cpuPerCall: (after - before) / time.Duration(calls),
	}.print(os.Stdout)
	return nil
}

// sustained runs o.workflows runs at a time, each started as the last one
// ended, and counts the calls gathered in a window after a warm-up.
func sustained(ctx context.Context, p peer, o options, meter cpuMeter) error {
	var stop atomic.Bool
	var wg sync.WaitGroup
	errs := make(chan error, o.workflows)
	for range o.workflows {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				if err := p.run(ctx, runID(o.system, 32), 32, o.rounds); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	time.Sleep(o.warmup)
	before, err := meter.read()
	if err != nil {
		return err
	}
	calls0 := recorder.calls.Load()
	start := time.Now()
	time.Sleep(o.duration)
	// A slow system gets a longer window: at least one round per run, so
	// the rate is not a count of a few rounds' edges (at most a minute).
	for recorder.calls.Load()-calls0 < int64(32*o.workflows) && time.Since(start) < time.Minute {
		time.Sleep(100 * time.Millisecond)
	}
	calls := recorder.calls.Load() - calls0
	window := time.Since(start)
	after, err := meter.read()
	if err != nil {
		return err
	}
	stop.Store(true)
	recorder.stopping.Store(true) // the runs end at their next model step
	wg.Wait()
	recorder.stopping.Store(false)
	recorder.forgetAll()
	select {
	case err := <-errs:
		return fmt.Errorf("sustained: %w", err)
	default:
	}
	if calls == 0 {
		return fmt.Errorf("sustained: no call answered in %v", window)
	}
	fmt.Fprintf(os.Stderr, "  sustained window %v\n", window.Round(time.Millisecond))
	row{
		system: o.system, config: o.config, guarantee: o.guarantee,
		measure: "sustained", n: int(calls),
		rate:       float64(calls) / window.Seconds(),
		cpuPerCall: (after - before) / time.Duration(calls),
	}.print(os.Stdout)
	return nil
}

// freePort prints a TCP port on 127.0.0.1 that nothing listens on now.
func freePort() error {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer l.Close()
	fmt.Println(l.Addr().(*net.TCPAddr).Port)
	return nil
}
