package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// row is one measured shape of one system in one configuration.
type row struct {
	system, config, guarantee string
	measure                   string // round1, round32, sustained
	n                         int    // rounds measured, or calls in the window
	p50, p99, cpuPerCall      time.Duration
	rate                      float64 // calls/s (sustained)
}

// print writes the row as one tab-separated line that table reads back,
// and a readable line to stderr.
func (r row) print(w io.Writer) {
	fmt.Fprintf(w, "row\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%.1f\n", r.system, r.config, r.measure, r.n,
		r.p50.Nanoseconds(), r.p99.Nanoseconds(), r.cpuPerCall.Nanoseconds(), r.rate)
	if r.measure == "idle" {
		fmt.Fprintf(os.Stderr, "  %s (%s) idle: the database or server spends %v of CPU a second\n", r.system, r.config, fmtDur(r.cpuPerCall))
	} else if r.measure == "sustained" {
		fmt.Fprintf(os.Stderr, "  %s (%s) %s: %.0f calls/s, CPU/call %v (%d calls)\n", r.system, r.config, r.measure, r.rate, fmtDur(r.cpuPerCall), r.n)
	} else {
		fmt.Fprintf(os.Stderr, "  %s (%s) %s: p50 %v p99 %v CPU/call %v (%d rounds)\n", r.system, r.config, r.measure, fmtDur(r.p50), fmtDur(r.p99), fmtDur(r.cpuPerCall), r.n)
	}
}

// An entry is one line of the table: a system in a configuration in one
// alternating round.
type entry struct {
	system, config string
	round          string
	rows           map[string]row
}

// guarantees says what each configuration survives and how often a step
// runs; the keys are system and configuration as run.sh names them.
var guarantees = map[string]string{
	"toolfleet|journaled":              "process crash (JetStream file store, no fsync per write); calls ≥1× (non-idempotent ≤1×), each id answered once",
	"toolfleet|journaled, sync always": "machine crash (the server fsyncs every write before it acknowledges it); calls ≥1× (non-idempotent ≤1×)",
	"toolfleet|loop":                   "calls and results stored as above; the run's state is in the coordinator's memory: a coordinator crash ends the run",
	"floor|floor":                      "calls and results stored as above, no run state",
	"floor|with the fleet's checks":    "as the floor, each call's arguments validated, strict envelopes, run in the harness",
	"floor|sync always":                "as the floor, on the server that fsyncs every write",
	"dbos|fsync on":                    "machine crash (a commit is fsynced); steps ≥1×, workflow outcome once",
	"dbos|fsync off":                   "process crash of the app and of PostgreSQL (committed to the OS); a machine crash can lose the last commits or corrupt the cluster; steps ≥1×",
	"temporal|sqlite file":             "machine crash (SQLite file, synchronous=FULL: a commit is fsynced); activities ≥1× (retried until they succeed)",
	"temporal|in memory":               "nothing past a server crash (the dev server's default store is in memory); activities ≥1×",
	"temporal|sqlite memory":           "nothing past a server crash; activities ≥1×",
}

// table reads run.sh's results directory — one subdirectory per
// alternating round holding peers.tsv and fleetbench.txt — and prints one
// table.
func table(args []string, w io.Writer) error {
	if len(args) != 1 {
		return fmt.Errorf("usage: peersbench table RESULTS-DIR")
	}
	dirs, err := filepath.Glob(filepath.Join(args[0], "round-*"))
	if err != nil {
		return err
	}
	sort.Strings(dirs)
	var entries []*entry
	for _, dir := range dirs {
		round := strings.TrimPrefix(filepath.Base(dir), "round-")
		fe, err := fleetEntries(filepath.Join(dir, "fleetbench.txt"), round)
		if err != nil {
			fmt.Fprintf(os.Stderr, "peersbench table: %v\n", err)
		}
		for _, e := range fe {
			if len(e.rows) > 0 { // a fleetbench run cut short prints no row
				entries = append(entries, e)
			}
		}
		pe, err := peerEntries(filepath.Join(dir, "peers.tsv"), round)
		if err != nil {
			fmt.Fprintf(os.Stderr, "peersbench table: %v\n", err)
		}
		entries = append(entries, pe...)
	}
	order := []string{"toolfleet|journaled", "toolfleet|journaled, sync always", "toolfleet|loop", "floor|floor", "floor|with the fleet's checks", "floor|sync always", "dbos|fsync on", "dbos|fsync off", "temporal|sqlite file", "temporal|in memory"}
	rank := func(e *entry) int {
		for i, k := range order {
			if k == e.system+"|"+e.config {
				return i
			}
		}
		return len(order)
	}
	sort.SliceStable(entries, func(i, j int) bool { return rank(entries[i]) < rank(entries[j]) })

	fmt.Fprintln(w, "| system | configuration | round | 1-call round p50 | p99 | CPU/call | 32-call round p50 | CPU/call | sustained calls/s | CPU/call |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|")
	for _, e := range entries {
		r1, r32, s := e.rows["round1"], e.rows["round32"], e.rows["sustained"]
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", e.system, e.config, e.round,
			cell(r1.p50), cell(r1.p99), cell(r1.cpuPerCall), cell(r32.p50), cell(r32.cpuPerCall), rate(s.rate), cell(s.cpuPerCall))
	}
	fmt.Fprintln(w)
	for _, e := range entries {
		if idle, ok := e.rows["idle"]; ok {
			fmt.Fprintf(w, "idle: %s, %s (round %s): the database or server spends %s of CPU a second doing nothing (counted in its CPU per call)\n",
				e.system, e.config, e.round, fmtDur(idle.cpuPerCall))
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "guarantees:")
	seen := map[string]bool{}
	for _, e := range entries {
		k := e.system + "|" + e.config
		if seen[k] {
			continue
		}
		seen[k] = true
		fmt.Fprintf(w, "  %s, %s: %s\n", e.system, e.config, guarantees[k])
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "each peer against toolfleet's journaled runs, per round (the peer's number ÷ toolfleet's: above 1 means toolfleet is faster or cheaper; sustained: toolfleet's journaled runs with 2 workers):")
	byRound := map[string]map[string]*entry{}
	for _, e := range entries {
		if byRound[e.round] == nil {
			byRound[e.round] = map[string]*entry{}
		}
		byRound[e.round][e.system+"|"+e.config] = e
	}
	var rounds []string
	for r := range byRound {
		rounds = append(rounds, r)
	}
	sort.Strings(rounds)
	for _, r := range rounds {
		loop := byRound[r]["toolfleet|loop"]
		for _, fk := range []string{"toolfleet|journaled", "toolfleet|journaled, sync always"} {
			tf := byRound[r][fk]
			if tf == nil {
				continue
			}
			for _, k := range order[6:] {
				p := byRound[r][k]
				if p == nil {
					continue
				}
				if fk != "toolfleet|journaled" && k != "dbos|fsync on" && k != "temporal|sqlite file" {
					continue // fsync against fsync only
				}
				line := fmt.Sprintf("  round %s, %s ÷ %s: 1-call p50 %s, 1-call CPU/call %s, 32-call p50 %s, 32-call CPU/call %s",
					r, strings.Replace(k, "|", " ", 1), strings.Replace(fk, "|", " ", 1),
					ratio(p.rows["round1"].p50, tf.rows["round1"].p50), ratio(p.rows["round1"].cpuPerCall, tf.rows["round1"].cpuPerCall),
					ratio(p.rows["round32"].p50, tf.rows["round32"].p50), ratio(p.rows["round32"].cpuPerCall, tf.rows["round32"].cpuPerCall))
				// Sustained: toolfleet's journaled runs, durable as the
				// peers' workflows are; its loop only where fleetbench
				// measured no journaled sustained row (before it had one).
				sus, what := tf, "journaled runs"
				if sus.rows["sustained"].rate == 0 && loop != nil {
					sus, what = loop, "loop (no journaled sustained row in this round)"
				}
				if fk == "toolfleet|journaled" && sus.rows["sustained"].rate > 0 && p.rows["sustained"].rate > 0 {
					line += fmt.Sprintf("; sustained: toolfleet's %s do %.1f× the calls/s, the peer's CPU per call is %s toolfleet's",
						what, sus.rows["sustained"].rate/p.rows["sustained"].rate, ratio(p.rows["sustained"].cpuPerCall, sus.rows["sustained"].cpuPerCall))
				}
				fmt.Fprintln(w, line)
			}
		}
	}
	printTargets(w, rounds, byRound)
	return nil
}

func ratio(peer, fleet time.Duration) string {
	if peer == 0 || fleet == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f×", float64(peer)/float64(fleet))
}

func cell(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return fmtDur(d)
}

func rate(r float64) string {
	if r == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f/s", r)
}

// fmtDur prints a duration as fleetbench does: three significant digits.
func fmtDur(d time.Duration) string {
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.3gs", d.Seconds())
	case d >= time.Millisecond:
		return fmt.Sprintf("%.3gms", float64(d)/1e6)
	default:
		return fmt.Sprintf("%.3gµs", float64(d)/1e3)
	}
}

func peerEntries(path, round string) ([]*entry, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []*entry
	idx := map[string]*entry{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		f := strings.Split(sc.Text(), "\t")
		if len(f) != 9 || f[0] != "row" {
			continue
		}
		k := f[1] + "|" + f[2]
		e := idx[k]
		if e == nil {
			e = &entry{system: f[1], config: f[2], round: round, rows: map[string]row{}}
			idx[k] = e
			out = append(out, e)
		}
		num := func(s string) time.Duration { v, _ := strconv.ParseInt(s, 10, 64); return time.Duration(v) }
		n, _ := strconv.Atoi(f[4])
		rt, _ := strconv.ParseFloat(f[8], 64)
		e.rows[f[3]] = row{system: f[1], config: f[2], measure: f[3], n: n, p50: num(f[5]), p99: num(f[6]), cpuPerCall: num(f[7]), rate: rt}
	}
	return out, sc.Err()
}

// fleetEntries picks fleetbench's rows of the same shapes out of its table.
func fleetEntries(path, round string) ([]*entry, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	journaled := &entry{system: "toolfleet", config: "journaled", round: round, rows: map[string]row{}}
	loop := &entry{system: "toolfleet", config: "loop", round: round, rows: map[string]row{}}
	floor := &entry{system: "floor", config: "floor", round: round, rows: map[string]row{}}
	synced := &entry{system: "toolfleet", config: "journaled, sync always", round: round, rows: map[string]row{}}
	checked := &entry{system: "floor", config: "with the fleet's checks", round: round, rows: map[string]row{}}
	floorSynced := &entry{system: "floor", config: "sync always", round: round, rows: map[string]row{}}
	for _, line := range strings.Split(string(b), "\n") {
		c := strings.Split(line, "|")
		if len(c) < 8 {
			continue
		}
		for i := range c {
			c[i] = strings.TrimSpace(c[i])
		}
		m := c[0]
		r := row{p50: parseDur(c[2]), p99: parseDur(c[3]), cpuPerCall: parseDur(c[6])}
		r.rate, _ = strconv.ParseFloat(strings.TrimSuffix(c[5], "/s"), 64)
		if strings.Contains(m, "sync always") {
			// fleetbench's sync phase: the same rounds on a server that
			// fsyncs every write.
			switch {
			case strings.HasPrefix(m, "floor: 1 call"):
				floorSynced.rows["round1"] = r
			case strings.HasPrefix(m, "floor: 32 calls"):
				floorSynced.rows["round32"] = r
			case strings.HasPrefix(m, "fleet: 1 echo call, full loop round, journaled"):
				synced.rows["round1"] = r
			case strings.HasPrefix(m, "fleet: 32 echo calls, full loop round, journaled"):
				synced.rows["round32"] = r
			}
			continue
		}
		switch {
		case strings.HasPrefix(m, "floor with the fleet's checks: 32 echo calls"):
			checked.rows["round32"] = r
		case strings.HasPrefix(m, "floor with the fleet's checks: sustained") && strings.Contains(m, " 2 worker"):
			checked.rows["sustained"] = r
		case strings.HasPrefix(m, "floor: 1 call"):
			floor.rows["round1"] = r
		case strings.HasPrefix(m, "floor: 32 calls"):
			floor.rows["round32"] = r
		case strings.HasPrefix(m, "floor: sustained calls") && strings.Contains(m, " 2 worker"):
			floor.rows["sustained"] = r
		case strings.HasPrefix(m, "fleet: 1 echo call, full loop round, journaled"):
			journaled.rows["round1"] = r
		case strings.HasPrefix(m, "fleet: 1 echo call, full loop round"):
			loop.rows["round1"] = r
		case strings.HasPrefix(m, "fleet: 32 echo calls, full loop round, journaled"):
			journaled.rows["round32"] = r
		case strings.HasPrefix(m, "fleet: 32 echo calls, full loop round") && !strings.Contains(m, "coordinators"):
			loop.rows["round32"] = r
		case strings.HasPrefix(m, "fleet: sustained echo calls, full loop, journaled") && strings.Contains(m, " 2 worker"):
			journaled.rows["sustained"] = r
		case strings.HasPrefix(m, "fleet: sustained echo calls, full loop") && strings.Contains(m, " 2 worker"):
			loop.rows["sustained"] = r
		}
	}
	out := []*entry{journaled, loop, floor}
	for _, e := range []*entry{synced, checked, floorSynced} {
		if len(e.rows) > 0 { // not in fleetbench's output before it measured them
			out = append(out, e)
		}
	}
	return out, nil
}

// parseDur reads fleetbench's durations (36µs, 1.16ms, 2.3s; "-" is none).
func parseDur(s string) time.Duration {
	s = strings.Replace(s, "µs", "us", 1)
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0
	}
	return d
}
