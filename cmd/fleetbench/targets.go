package main

import (
	"fmt"
	"io"
	"runtime"
	"strings"
	"time"
)

// A target is one of the data path's goals: a ratio between two figures of
// the same run held to a limit. The table below is the only place the
// targets are spelled: the report prints it, and docs/BENCHMARKS.md ("The
// targets") lists the same texts (TestTargetsInDocs).
type target struct {
	// text names the target as the report and the docs show it.
	text string
	// atMost: the ratio must be at most limit; otherwise at least limit.
	atMost bool
	limit  float64
	// measure returns the ratio and what it was computed from, or ok false
	// when the run did not measure both sides.
	measure func(b *bench) (ratio float64, detail string, ok bool)
}

// targets are the current goals (issue 28's, as issue 41 restated them),
// in the report's order.
var targets = []target{
	{
		text: "32-call loop round CPU per call ≤ 1.2 × the durable floor", atMost: true, limit: 1.2,
		measure: func(b *bench) (float64, string, bool) {
			return durationRatio(b.loopRound.cpu, b.floorRound.cpu, b.loopRound.n > 0 && b.floorRound.n > 0)
		},
	},
	{
		text: "32-call loop round CPU per call ≤ 1.0 × the floor with the fleet's checks", atMost: true, limit: 1.0,
		measure: func(b *bench) (float64, string, bool) {
			return durationRatio(b.loopRound.cpu, b.checkedRound.cpu, b.loopRound.n > 0 && b.checkedRound.n > 0)
		},
	},
	{
		text: "32-call loop round p50 ≤ 1.0 × the durable floor", atMost: true, limit: 1.0,
		measure: func(b *bench) (float64, string, bool) {
			return durationRatio(b.loopRound.p50, b.floorRound.p50, b.loopRound.n > 0 && b.floorRound.n > 0)
		},
	},
	{
		text: "sustained full-loop calls/s with 2 workers ≥ 0.9 × the durable floor", limit: 0.9,
		measure: func(b *bench) (float64, string, bool) {
			return rateRatio(b.sustainedLoop[2], b.floorSustained[2])
		},
	},
	{
		// On two cores shared by the server, the workers and the
		// coordinator, more workers need not do more calls: the floor's
		// own ratio is the reference, measured in the same run.
		text: "sustained full-loop calls/s, 4 ÷ 2 workers ≥ 1.0 × the same ratio of the floor with the fleet's checks", limit: 1.0,
		measure: func(b *bench) (float64, string, bool) {
			fleet, _, ok := rateRatio(b.sustainedLoop[4], b.sustainedLoop[2])
			checked, _, ok2 := rateRatio(b.checkedSustained[4], b.checkedSustained[2])
			if !ok || !ok2 {
				return 0, "", false
			}
			return fleet / checked, fmt.Sprintf("the fleet's 4 ÷ 2 workers %.2f×, %s against %s; the floor with the fleet's checks' %.2f×",
				fleet, b.sustainedLoop[4].rate(), b.sustainedLoop[2].rate(), checked), true
		},
	},
	{
		text: "journaled 1-call loop round p50 ≤ 1.5 × the unjournaled one", atMost: true, limit: 1.5,
		measure: func(b *bench) (float64, string, bool) {
			return durationRatio(b.journalSingle.p50, b.loopSingle.p50, b.journalSingle.n > 0 && b.loopSingle.n > 0)
		},
	},
	{
		text: "journaled 32-call loop round CPU per call ≤ 1.1 × the unjournaled one", atMost: true, limit: 1.1,
		measure: func(b *bench) (float64, string, bool) {
			return durationRatio(b.journalRound.cpu, b.loopRound.cpu, b.journalRound.n > 0 && b.loopRound.n > 0)
		},
	},
	{
		text: "a non-idempotent call ≤ 1.15 × an idempotent one in CPU per call", atMost: true, limit: 1.15,
		measure: func(b *bench) (float64, string, bool) {
			return durationRatio(b.onceRound.cpu, b.loopRound.cpu, b.onceRound.n > 0 && b.loopRound.n > 0)
		},
	},
	{
		text: "1,000 held runs under 60 KiB each", atMost: true, limit: 1.0,
		measure: func(b *bench) (float64, string, bool) {
			if b.mem == nil || b.mem.runs < 1000 {
				return 0, "", false
			}
			return float64(b.mem.perRun) / (60 << 10), fmt.Sprintf("%s per run for %d runs", kib(b.mem.perRun), b.mem.runs), true
		},
	},
}

// durationRatio is a/b with both shown, if measured.
func durationRatio(a, b time.Duration, measured bool) (float64, string, bool) {
	if !measured || a <= 0 || b <= 0 {
		return 0, "", false
	}
	return float64(a) / float64(b), fmt.Sprintf("%v against %v", a.Round(time.Microsecond), b.Round(time.Microsecond)), true
}

// rateRatio is the ratio of two throughput windows' calls, if both ran.
func rateRatio(a, b *window) (float64, string, bool) {
	if a == nil || b == nil || a.calls.Load() == 0 || b.calls.Load() == 0 {
		return 0, "", false
	}
	return float64(a.calls.Load()) / float64(b.calls.Load()), fmt.Sprintf("%s against %s", a.rate(), b.rate()), true
}

// verdict is the report's word for one target.
func (t target) verdict(ratio float64) string {
	if (t.atMost && ratio <= t.limit) || (!t.atMost && ratio >= t.limit) {
		return "met"
	}
	return "NOT met"
}

// printTargets reports every target against this run's figures, then the
// fleet against the floor with the fleet's checks, the reference the
// targets leave out.
func (b *bench) printTargets(w io.Writer) {
	fmt.Fprintln(w, "\ntargets:")
	for _, t := range targets {
		r, detail, ok := t.measure(b)
		if !ok {
			fmt.Fprintf(w, "  %s: not measured in this run\n", t.text)
			continue
		}
		fmt.Fprintf(w, "  %s: %.2f× (%s): %s\n", t.text, r, detail, t.verdict(r))
	}
	if b.loopRound.n > 0 && b.checkedRound.n > 0 && b.checkedRound.cpu > 0 && b.floorRound.cpu > 0 {
		fmt.Fprintf(w, "  (the floor with the fleet's checks: %.2f× the floor's CPU per call, %s its round p50; the fleet's full loop round against it: %.2f× CPU per call, %s p50)\n",
			float64(b.checkedRound.cpu)/float64(b.floorRound.cpu), ratio(b.checkedRound.p50, b.floorRound.p50),
			float64(b.loopRound.cpu)/float64(b.checkedRound.cpu), ratio(b.loopRound.p50, b.checkedRound.p50))
	}
	if b.onceRound.n > 0 && b.claimedRound.cpu > 0 && b.checkedRound.cpu > 0 {
		fmt.Fprintf(w, "  (a claim on the floor with the fleet's checks: %.2f× its CPU per call, +%v a call; the fleet's non-idempotent call: +%v a call)\n",
			float64(b.claimedRound.cpu)/float64(b.checkedRound.cpu), (b.claimedRound.cpu - b.checkedRound.cpu).Round(time.Microsecond), (b.onceRound.cpu - b.loopRound.cpu).Round(time.Microsecond))
	}
	if c := b.checkedSustained[2]; c != nil && c.calls.Load() > 0 {
		if loop, ok := b.sustainedLoop[2]; ok {
			fmt.Fprintf(w, "  (sustained with 2 workers, the fleet's full loop against the floor with the fleet's checks: %.2f×, %s against %s)\n",
				float64(loop.calls.Load())/float64(c.calls.Load()), loop.rate(), c.rate())
		}
	}
	b.printScaling(w)
}

// scalingBase is the worker count the sustained rates of the others are
// divided by in the report's scaling line.
const scalingBase = 2

// printScaling shows the sustained full-loop rate of each other worker
// count against scalingBase workers', beside the floor's same ratio: the
// floor's is the scaling this machine allows the design at all, as its
// workers, server and requester share the machine's cores.
func (b *bench) printScaling(w io.Writer) {
	var by []string
	for _, n := range b.p.workers {
		if n == scalingBase {
			continue
		}
		if b.sustainedLoop[n] == nil || b.sustainedLoop[scalingBase] == nil {
			continue // not measured in this run
		}
		by = append(by, fmt.Sprintf("%d÷%d workers: the fleet's full loop %s, the floor's %s", n, scalingBase,
			scaled(b.sustainedLoop[n], b.sustainedLoop[scalingBase]), scaled(b.floorSustained[n], b.floorSustained[scalingBase])))
	}
	if len(by) > 0 {
		fmt.Fprintf(w, "  (sustained calls/s by workers on this machine's %d cores: %s)\n", runtime.NumCPU(), strings.Join(by, "; "))
	}
}

// scaled is a's sustained rate against b's, or "-" when either window
// finished no call (a window too short for the machine's load).
func scaled(a, b *window) string {
	r, _, ok := rateRatio(a, b)
	if !ok {
		return "-"
	}
	return fmt.Sprintf("%.2f×", r)
}
