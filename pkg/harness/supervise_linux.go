package harness

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// On Linux every exec tool runs under a supervisor: the worker's own
// binary, re-executed (/proc/self/exe) with argv[0] supervisorArg0. The
// supervisor is a child subreaper (PR_SET_CHILD_SUBREAPER), so every
// process the tool starts stays in its subtree even after setsid or a
// double fork; it starts the tool in a process group of its own (through
// the launcher when the tool has limits or another user), reaps it, and
// when the tool exits, or on SIGTERM (the call's deadline or cancel, and
// the worker's death: its parent-death signal), kills the tool's group and
// every process left in its subtree. It reports on fd 3 the tool's pid,
// how the tool ended and how many processes had left the tool's process
// group. Its environment is the tool's (never the worker's), and it holds
// no credentials.
//
// The launcher (argv[0] launcherArg0) applies the tool's rlimits, switches
// to the tool's user and execs the tool's program, so the limits and the
// user hold from the program's first instruction.
const (
	supervisorArg0 = "toolfleet-exec-supervisor"
	launcherArg0   = "toolfleet-exec-launcher"
	// supervisedWaitDelay bounds how long Execute waits for a supervisor
	// to clean up after SIGTERM before it kills it.
	supervisedWaitDelay = 5 * time.Second
	// maxStatusBytes bounds what is read from a supervisor's status pipe.
	maxStatusBytes = 4 << 10
)

func init() {
	if len(os.Args) != 2 {
		return
	}
	switch filepath.Base(os.Args[0]) {
	case supervisorArg0:
		os.Exit(supervise(os.Args[1]))
	case launcherArg0:
		os.Exit(launch(os.Args[1]))
	}
}

// superviseSpec is what the supervisor and the launcher run.
type superviseSpec struct {
	Path   string   `json:"path"`
	Argv   []string `json:"argv"`
	User   *runAs   `json:"user,omitempty"`
	Limits Limits   `json:"limits"`
	// DropEnv names a variable of the supervisor's environment that is not
	// the tool's (GORACE, which keeps a race-enabled build of the worker
	// from sleeping a second on exit).
	DropEnv string `json:"drop_env,omitempty"`
}

// supervision is the worker's end of one supervised run.
type supervision struct {
	r, w *os.File
}

// supervised rewrites cmd, built to run c directly, to run c under a
// supervisor.
func (c *command) supervised(cmd *exec.Cmd) (*supervision, error) {
	ss := superviseSpec{Path: c.path, Argv: c.argv, User: c.user, Limits: c.limits}
	if !slices.ContainsFunc(c.env, func(kv string) bool { return strings.HasPrefix(kv, "GORACE=") }) {
		cmd.Env = append(cmd.Env, "GORACE=atexit_sleep_ms=0")
		ss.DropEnv = "GORACE"
	}
	spec, err := json.Marshal(ss)
	if err != nil {
		return nil, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd.Path = "/proc/self/exe"
	cmd.Args = []string{supervisorArg0, string(spec)}
	// The status pipe is the supervisor's fd 3; a progress pipe
	// (progressPipe), its fd 4, becomes the tool's fd 3.
	cmd.ExtraFiles = append([]*os.File{w}, cmd.ExtraFiles...)
	// Its own group; SIGTERM when the worker dies, so that it cleans up.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = supervisedWaitDelay
	return &supervision{r: r, w: w}, nil
}

// started is called once the supervisor runs: the worker keeps no copy of
// the status pipe's write end, so reading ends when the supervisor exits.
func (s *supervision) started() { s.w.Close() }

// abort releases the pipe of a supervisor that never started.
func (s *supervision) abort() { s.r.Close(); s.w.Close() }

// supStatus is what a supervisor reported.
type supStatus struct {
	toolPID  int  // 0: never started
	ended    bool // the supervisor reported how the tool ended
	code     int  // exit code, or -1 when signalled
	signal   syscall.Signal
	escaped  int // processes that had left the tool's process group
	startErr bool
}

// finish reads the supervisor's report (after it exited) and kills what
// may be left of the tool's group if the supervisor could not.
func (s *supervision) finish() supStatus {
	defer s.r.Close()
	st := parseStatus(s.r)
	if st.toolPID > 0 {
		_ = killGroup(st.toolPID)
	}
	return st
}

// parseStatus reads a supervisor's report, up to maxStatusBytes; unknown
// or malformed lines are ignored.
func parseStatus(r io.Reader) supStatus {
	var st supStatus
	sc := bufio.NewScanner(io.LimitReader(r, maxStatusBytes))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) == 2 && f[0] == "started":
			st.toolPID, _ = strconv.Atoi(f[1])
		case len(f) == 4 && f[0] == "exit":
			st.ended = true
			st.code, _ = strconv.Atoi(f[1])
			sig, _ := strconv.Atoi(f[2])
			st.signal = syscall.Signal(sig)
			st.escaped, _ = strconv.Atoi(f[3])
		case len(f) == 1 && f[0] == "start-error":
			st.startErr = true
		}
	}
	if st.toolPID <= 1 {
		st.toolPID = 0 // never kill(0) or kill(-1): only a real child's group
	}
	return st
}

// supervise is the supervisor's main.
func supervise(specJSON string) int {
	status := os.NewFile(3, "status")
	report := func(format string, args ...any) { fmt.Fprintf(status, format+"\n", args...) }
	var spec superviseSpec
	if err := json.Unmarshal([]byte(specJSON), &spec); err != nil {
		report("start-error")
		return 127
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		report("start-error")
		return 127
	}
	path, argv := spec.Path, spec.Argv
	if spec.User != nil || !spec.Limits.zero() {
		path, argv = "/proc/self/exe", []string{launcherArg0, specJSON}
	}
	env := os.Environ()
	if spec.DropEnv != "" {
		env = slices.DeleteFunc(env, func(kv string) bool { return strings.HasPrefix(kv, spec.DropEnv+"=") })
	}
	files := []*os.File{os.Stdin, os.Stdout, os.Stderr}
	if slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, EnvProgressFD+"=") }) {
		progress := os.NewFile(4, "progress")
		defer progress.Close() // the tool holds it; its reader sees the end when the tool's tree exits
		files = append(files, progress)
	}
	p, err := os.StartProcess(path, argv, &os.ProcAttr{
		Env:   env,
		Files: files,
		Sys:   &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL},
	})
	if err != nil {
		report("start-error")
		return 127
	}
	tool := p.Pid
	report("started %d", tool)

	type reaped struct {
		pid int
		ws  syscall.WaitStatus
	}
	reaps := make(chan reaped, 16)
	go func() {
		defer close(reaps)
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, 0, nil)
			if err == syscall.EINTR {
				continue
			}
			if err != nil { // ECHILD: nothing left
				return
			}
			reaps <- reaped{pid, ws}
		}
	}()

	escaped := map[int]bool{}
	code, sig := -1, 0
	cleaning := false
	for {
		select {
		case r, ok := <-reaps:
			if !ok {
				report("exit %d %d %d", code, sig, len(escaped))
				switch {
				case code >= 0:
					return code
				default:
					return 128 + sig
				}
			}
			if r.pid == tool {
				switch {
				case r.ws.Exited():
					code = r.ws.ExitStatus()
				case r.ws.Signaled():
					sig = int(r.ws.Signal())
				}
				cleaning = true
			}
			if cleaning {
				killLeftovers(tool, escaped)
			}
		case <-sigs:
			cleaning = true
			killLeftovers(tool, escaped)
		}
	}
}

// killLeftovers kills the tool's process group and every child of the
// supervisor (orphans of the tool's subtree are re-parented to it),
// recording those outside the tool's group as escaped.
func killLeftovers(toolPgid int, escaped map[int]bool) {
	_ = syscall.Kill(-toolPgid, syscall.SIGKILL)
	for _, pid := range children() {
		if pgid, err := syscall.Getpgid(pid); err == nil && pgid != toolPgid {
			escaped[pid] = true
		}
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// children lists the supervisor's live children, from
// /proc/self/task/*/children, or by scanning /proc where that file does not
// exist.
func children() []int {
	var out []int
	tasks, _ := filepath.Glob("/proc/self/task/*/children")
	if len(tasks) > 0 {
		for _, t := range tasks {
			b, err := os.ReadFile(t)
			if err != nil {
				continue
			}
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil {
					out = append(out, pid)
				}
			}
		}
		return out
	}
	self := os.Getpid()
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		b, err := os.ReadFile(d + "/stat")
		if err != nil {
			continue
		}
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) > 1 {
			if ppid, _ := strconv.Atoi(f[1]); ppid == self {
				pid, _ := strconv.Atoi(filepath.Base(d))
				out = append(out, pid)
			}
		}
	}
	return out
}

// launch is the launcher's main: limits, user, exec.
func launch(specJSON string) int {
	var spec superviseSpec
	if err := json.Unmarshal([]byte(specJSON), &spec); err != nil {
		return 127
	}
	l := spec.Limits
	for _, lim := range []struct {
		res  int
		v    uint64
		hard uint64
	}{
		{unix.RLIMIT_NOFILE, l.OpenFiles, l.OpenFiles},
		{unix.RLIMIT_NPROC, l.Processes, l.Processes},
		// SIGXCPU at the soft limit, SIGKILL a second later.
		{unix.RLIMIT_CPU, l.CPUSeconds, l.CPUSeconds + 1},
		{unix.RLIMIT_AS, l.MemoryBytes, l.MemoryBytes},
	} {
		if lim.v == 0 {
			continue
		}
		// syscall.Setrlimit, not unix.Setrlimit: it also keeps Exec from
		// restoring the open-files limit Go raised at start-up.
		if err := syscall.Setrlimit(lim.res, &syscall.Rlimit{Cur: lim.v, Max: lim.hard}); err != nil {
			return 126
		}
	}
	if u := spec.User; u != nil {
		if err := syscall.Setgroups([]int{int(u.GID)}); err != nil {
			return 126
		}
		if err := syscall.Setgid(int(u.GID)); err != nil {
			return 126
		}
		if err := syscall.Setuid(int(u.UID)); err != nil {
			return 126
		}
		// A change of credentials clears the parent-death signal.
		_ = unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(syscall.SIGKILL), 0, 0, 0)
	}
	_ = syscall.Exec(spec.Path, spec.Argv, os.Environ())
	return 127
}
