package main

import (
	"fmt"
	"slices"
	"sync"
	"time"
)

// samples collects latencies; it is safe for concurrent use.
type samples struct {
	mu sync.Mutex
	d  []time.Duration
}

func (s *samples) add(d time.Duration) {
	s.mu.Lock()
	s.d = append(s.d, d)
	s.mu.Unlock()
}

// summary is what a row prints about a latency distribution.
type summary struct {
	n              int
	p50, p99, mean time.Duration
	// cpu is the process's CPU time per call (or per message for the
	// baselines), warm-up included.
	cpu time.Duration
	// msgs is the messages the server received and sent per call (or per
	// message for the baselines), warm-up included: JetStream's internal
	// ones too. Unlike time it does not move with the machine's load.
	msgs float64
	// calls is how many calls the measure made, warm-up included (the
	// fleet's rounds; 0 where a measure does not count them).
	calls int
}

// serverMsgs returns the messages the server has received and sent so far;
// nil (no server) counts none.
var serverMsgs func() int64

// cpuMeter measures the process's CPU time and the server's messages from
// its start.
type cpuMeter struct {
	cpu  time.Duration
	msgs int64
}

func startCPU() cpuMeter { return cpuMeter{cpu: cpuTime(), msgs: countServerMsgs()} }

func countServerMsgs() int64 {
	if serverMsgs == nil {
		return 0
	}
	return serverMsgs()
}

// per is the CPU time since the start divided by ops.
func (m cpuMeter) per(ops int) time.Duration {
	used := cpuTime() - m.cpu
	if ops <= 0 || m.cpu == 0 || used <= 0 {
		return 0
	}
	return used / time.Duration(ops)
}

// msgsPer is the server's messages since the start divided by ops.
func (m cpuMeter) msgsPer(ops int) float64 {
	if ops <= 0 || serverMsgs == nil {
		return 0
	}
	return float64(countServerMsgs()-m.msgs) / float64(ops)
}

func (s *samples) summary() summary {
	s.mu.Lock()
	d := slices.Clone(s.d)
	s.mu.Unlock()
	if len(d) == 0 {
		return summary{}
	}
	slices.Sort(d)
	var total time.Duration
	for _, x := range d {
		total += x
	}
	return summary{n: len(d), p50: rank(d, 0.50), p99: rank(d, 0.99), mean: total / time.Duration(len(d))}
}

// rank is the nearest-rank percentile of sorted d.
func rank(d []time.Duration, p float64) time.Duration {
	i := int(p*float64(len(d))+0.999999) - 1
	return d[min(max(i, 0), len(d)-1)]
}

// dur prints a latency with three significant digits.
func dur(d time.Duration) string {
	switch {
	case d <= 0:
		return "-"
	case d < time.Millisecond:
		return fmt.Sprintf("%.0fµs", float64(d)/float64(time.Microsecond))
	case d < 10*time.Millisecond:
		return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
	case d < time.Second:
		return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.2fs", d.Seconds())
	}
}

// rate prints a count per second.
func rate(n int64, d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f/s", float64(n)/d.Seconds())
}

// ratio prints a ÷ b.
func ratio(a, b time.Duration) string {
	if a <= 0 || b <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f×", float64(a)/float64(b))
}

// mib prints a byte count in MiB.
func mib(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// kib prints a byte count in KiB.
func kib(b float64) string { return fmt.Sprintf("%.0f KiB", b/(1<<10)) }
