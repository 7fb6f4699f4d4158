package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// modelResponse is what the model step returns: a fixed response of the
// size of a short assistant message asking for tool calls.
var modelResponse = strings.Repeat("m", 256)

// echoText is each echo call's argument (and so its result): 128 bytes, as
// fleetbench's echo calls carry.
var echoText = strings.Repeat("e", 128)

// stamps records, for each run, when each model step was entered and when it
// returned. A round is timed from the return of model step k to the entry of
// model step k+1: checkpointing the model's output, starting the calls,
// running and checkpointing them, gathering their results and starting the
// next model step. fleetbench times a loop round the same way (from the
// model's answer to the loop's next request).
type stamps struct {
	mu   sync.Mutex
	runs map[string]*runStamps
	// calls counts calls whose results a run had gathered: when model step
	// k+1 starts, the N calls of round k are answered.
	calls atomic.Int64
	// stopping makes every model step answer finalAnswer.
	stopping atomic.Bool
}

type runStamps struct {
	n       int
	entered map[int]time.Time
	exited  map[int]time.Time
}

var recorder = &stamps{runs: map[string]*runStamps{}}

// finalAnswer is the model step's response once the benchmark stops
// starting rounds: the model answers and the run ends, as an agent's does.
const finalAnswer = "final answer"

// model is the model step's body: it records its entry and return.
func (s *stamps) model(run string, step, n int) string {
	if s.stopping.Load() {
		return finalAnswer
	}
	now := time.Now()
	s.mu.Lock()
	r := s.runs[run]
	if r == nil {
		r = &runStamps{n: n, entered: map[int]time.Time{}, exited: map[int]time.Time{}}
		s.runs[run] = r
	}
	if _, seen := r.entered[step]; !seen {
		r.entered[step] = now
		if step > 0 {
			s.calls.Add(int64(n))
		}
	}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		if _, seen := r.exited[step]; !seen {
			r.exited[step] = time.Now()
		}
		s.mu.Unlock()
	}()
	return modelResponse
}

// rounds returns the round latencies of the given runs, and forgets them.
func (s *stamps) rounds(runs []string) []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []time.Duration
	for _, id := range runs {
		r := s.runs[id]
		delete(s.runs, id)
		if r == nil {
			continue
		}
		for k := 0; ; k++ {
			ex, ok1 := r.exited[k]
			en, ok2 := r.entered[k+1]
			if !ok1 || !ok2 {
				break
			}
			out = append(out, en.Sub(ex))
		}
	}
	return out
}

// forgetAll drops every run's stamps (the sustained phase keeps none).
func (s *stamps) forgetAll() {
	s.mu.Lock()
	s.runs = map[string]*runStamps{}
	s.mu.Unlock()
}

func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(p*float64(len(s))+0.5) - 1
	if i < 0 {
		i = 0
	}
	if i >= len(s) {
		i = len(s) - 1
	}
	return s[i]
}

// clockTick is the unit of utime and stime in /proc/<pid>/stat
// (sysconf(_SC_CLK_TCK), 100 on Linux).
const clockTick = 10 * time.Millisecond

// cpuMeter sums the CPU time of this process (getrusage) and of every
// process in the trees rooted at the given pids: utime+stime of each live
// process plus cutime+cstime (the CPU of its children that have exited and
// been waited for, such as PostgreSQL backends that ended), so a backend
// that comes and goes between two readings is still counted.
type cpuMeter struct {
	roots      []int
	serverOnly bool // leave this process out
}

func (m cpuMeter) read() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, err
	}
	total := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	if m.serverOnly {
		total = 0
	}
	if len(m.roots) == 0 {
		return total, nil
	}
	procs, err := readProcs()
	if err != nil {
		return 0, err
	}
	children := map[int][]int{}
	for pid, p := range procs {
		children[p.ppid] = append(children[p.ppid], pid)
	}
	seen := map[int]bool{}
	queue := append([]int(nil), m.roots...)
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		if seen[pid] || pid == os.Getpid() {
			continue
		}
		seen[pid] = true
		p, ok := procs[pid]
		if !ok {
			return 0, fmt.Errorf("process %d is gone", pid)
		}
		total += time.Duration(p.ticks) * clockTick
		queue = append(queue, children[pid]...)
	}
	return total, nil
}

type procStat struct {
	ppid  int
	ticks int64 // utime+stime+cutime+cstime
}

func readProcs() (map[int]procStat, error) {
	dirs, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		return nil, err
	}
	out := make(map[int]procStat, len(dirs))
	for _, path := range dirs {
		b, err := os.ReadFile(path)
		if err != nil {
			continue // exited meanwhile
		}
		pid, err := strconv.Atoi(filepath.Base(filepath.Dir(path)))
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		// f[0] is field 3 (state): ppid is field 4, utime..cstime 14..17.
		if len(f) < 15 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		var ticks int64
		for _, k := range []int{11, 12, 13, 14} {
			v, _ := strconv.ParseInt(f[k], 10, 64)
			ticks += v
		}
		out[pid] = procStat{ppid: ppid, ticks: ticks}
	}
	return out, nil
}

func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
