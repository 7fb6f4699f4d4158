package main

import (
	"fmt"
	"io"
)

// A target is one of the peer targets toolfleet is held to: a ratio of
// DBOS's number (fsync on) to toolfleet's, at least min. Beside toolfleet's
// ratio the report prints the floor's in the same round — the same ratio
// with bare NATS (and the floor with the fleet's checks) in toolfleet's
// place — which is what any design on that server and transport can reach.
type target struct {
	name string
	min  float64
	// fleet and ceilings name an entry ("system|config") and read the
	// number compared from it; peer reads DBOS's.
	fleet    string
	ceilings []string
	read     func(e *entry) float64
	// inverse: toolfleet's number ÷ the peer's (a rate), not the peer's ÷
	// toolfleet's.
	inverse bool
}

func cpu(measure string) func(*entry) float64 {
	return func(e *entry) float64 { return float64(e.rows[measure].cpuPerCall) }
}

func p50(measure string) func(*entry) float64 {
	return func(e *entry) float64 { return float64(e.rows[measure].p50) }
}

func sustainedRate(e *entry) float64 { return e.rows["sustained"].rate }

// peerTargets are issue 41's targets against DBOS with fsync on.
var peerTargets = []target{
	{name: "32-call round CPU per call", min: 10, fleet: "toolfleet|journaled",
		ceilings: []string{"floor|floor", "floor|with the fleet's checks"}, read: cpu("round32")},
	{name: "1-call round CPU", min: 2, fleet: "toolfleet|journaled",
		ceilings: []string{"floor|floor"}, read: cpu("round1")},
	{name: "both fsyncing every write, 1-call round p50", min: 2, fleet: "toolfleet|journaled, sync always",
		ceilings: []string{"floor|sync always"}, read: p50("round1")},
	{name: "both fsyncing every write, 32-call round CPU per call", min: 5, fleet: "toolfleet|journaled, sync always",
		ceilings: []string{"floor|sync always"}, read: cpu("round32")},
	{name: "sustained calls/s, toolfleet journaled ÷ DBOS", min: 5.7, fleet: "toolfleet|journaled",
		ceilings: []string{"floor|floor", "floor|with the fleet's checks"}, read: sustainedRate, inverse: true},
}

// printTargets prints, for each round with DBOS fsync on, every peer
// target: toolfleet's ratio, met or not, and the floor's ratio in the same
// round. A target the floor itself does not reach cannot be met by the
// fleet on that server, whatever the fleet does.
func printTargets(w io.Writer, rounds []string, byRound map[string]map[string]*entry) {
	first := true
	for _, r := range rounds {
		peer := byRound[r]["dbos|fsync on"]
		if peer == nil {
			continue
		}
		if first {
			fmt.Fprintln(w)
			fmt.Fprintln(w, "targets against DBOS with fsync on, per round: toolfleet's ratio, and in brackets the same ratio with the floor in toolfleet's place (what bare NATS, storing each call and its result as the fleet does, reaches on the same server in the same round: a target above it is out of reach of the fleet there):")
			first = false
		}
		fmt.Fprintf(w, "  round %s\n", r)
		for _, t := range peerTargets {
			got := t.ratio(peer, byRound[r][t.fleet])
			verdict := "NOT met"
			switch {
			case got == 0:
				verdict = "not measured"
			case got >= t.min:
				verdict = "met"
			}
			line := fmt.Sprintf("    %s ≥ %.3g×: %s, %s", t.name, t.min, fmtRatio(got), verdict)
			for _, c := range t.ceilings {
				if v := t.ratio(peer, byRound[r][c]); v > 0 {
					line += fmt.Sprintf(" [%s: %s]", c, fmtRatio(v))
				}
			}
			fmt.Fprintln(w, line)
		}
	}
}

// ratio is DBOS's number over e's (e's over DBOS's for a rate); 0 when
// either is missing.
func (t target) ratio(peer, e *entry) float64 {
	if peer == nil || e == nil {
		return 0
	}
	a, b := t.read(peer), t.read(e)
	if t.inverse {
		a, b = b, a
	}
	if a == 0 || b == 0 {
		return 0
	}
	return a / b
}

func fmtRatio(v float64) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f×", v)
}
