package main

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/nats-io/nats-server/v2/server"
)

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
