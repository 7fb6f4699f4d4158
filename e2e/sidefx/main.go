// Command sidefx is the exec tool of the end-to-end tests: it records each
// run as lines in a file, so a test can count how many times a call really
// ran, on which worker, and whether it finished.
//
// It reads its arguments as JSON on stdin:
//
//	{"id": "a1", "sleep_ms": 1500, "exit": 0, "output": "text"}
//
// appends "start <id> <pid> <ppid>" to the file named by $SIDEFX_LOG (ppid
// is the worker that started it: the parent, or the parent's parent when
// the parent is the worker's exec supervisor) and "key <id> <call key>" (the
// call's $TOOLFLEET_CALL_KEY), sleeps, appends "done <id> <pid>", prints
// "ran <id> pid <pid> worker-pid <ppid>" (or "output" when given) and exits
// with "exit". A killed run never writes its done line.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

type args struct {
	ID      string `json:"id"`
	SleepMS int    `json:"sleep_ms"`
	Exit    int    `json:"exit"`
	Output  string `json:"output"`
}

func main() {
	var a args
	data, err := io.ReadAll(io.LimitReader(os.Stdin, 1<<20))
	if err == nil {
		err = json.Unmarshal(data, &a)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "sidefx: bad arguments")
		os.Exit(2)
	}
	pid, ppid := os.Getpid(), workerPID()
	record(fmt.Sprintf("start %s %d %d\n", a.ID, pid, ppid))
	if key := os.Getenv("TOOLFLEET_CALL_KEY"); key != "" {
		record(fmt.Sprintf("key %s %s\n", a.ID, key))
	}
	time.Sleep(time.Duration(a.SleepMS) * time.Millisecond)
	record(fmt.Sprintf("done %s %d\n", a.ID, pid))
	if a.Output != "" {
		fmt.Print(a.Output)
	} else {
		fmt.Printf("ran %s pid %d worker-pid %d", a.ID, pid, ppid)
	}
	os.Exit(a.Exit)
}

// workerPID is the pid of the worker that runs the tool: the parent, or
// its parent when the parent is the worker's exec supervisor.
func workerPID() int {
	ppid := os.Getppid()
	cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", ppid))
	if argv0, _, _ := strings.Cut(string(cmdline), "\x00"); argv0 != "toolfleet-exec-supervisor" {
		return ppid
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", ppid))
	if err != nil {
		return ppid
	}
	i := strings.LastIndexByte(string(stat), ')')
	if f := strings.Fields(string(stat[i+1:])); i >= 0 && len(f) > 1 {
		if gp, err := strconv.Atoi(f[1]); err == nil {
			return gp
		}
	}
	return ppid
}

// record appends one line in a single write, so concurrent runs never
// interleave within a line.
func record(line string) {
	path := os.Getenv("SIDEFX_LOG")
	if path == "" {
		return
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, "sidefx: cannot open the log")
		os.Exit(3)
	}
	if _, err := f.Write([]byte(line)); err != nil {
		os.Exit(3)
	}
	f.Close()
}
