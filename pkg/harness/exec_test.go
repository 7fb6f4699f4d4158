package harness_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/internal/testsync"
	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// execTool writes script (a /bin/sh body) into a temp dir and returns the
// exec tool a manifest entry for it describes. env goes into the manifest.
func execTool(t testing.TB, name, script string, env map[string]string) harness.Tool {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, name+".sh")
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+script), 0o755); err != nil {
		t.Fatal(err)
	}
	entry := map[string]any{"name": name, "command": []string{"./" + name + ".sh"}, "timeout": "10s"}
	if env != nil {
		entry["env"] = env
	}
	manifest, _ := json.Marshal(map[string]any{"tools": []any{entry}})
	mpath := filepath.Join(dir, "tools.json")
	if err := os.WriteFile(mpath, manifest, 0o644); err != nil {
		t.Fatal(err)
	}
	tools, err := harness.LoadManifest(mpath)
	if err != nil {
		t.Fatalf("LoadManifest: %v", err)
	}
	return tools[0]
}

// processGone reports whether pid has exited (it is gone or a zombie that
// only waits to be reaped).
func processGone(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// pid (comm) state ...: comm may hold spaces, so look after the last ')'.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return true
	}
	state := s[i+2]
	return state == 'Z' || state == 'X'
}

// readPids reads one pid a line.
func readPids(t testing.TB, path string) []int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("reading pids: %v", err)
	}
	defer f.Close()
	var pids []int
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if pid, err := strconv.Atoi(strings.TrimSpace(sc.Text())); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// treeScript starts two background sleeps and a waiting shell, writing all
// three pids to $PIDDIR/pids.
const treeScript = `sleep 1000 & echo $! >> "$PIDDIR/pids"
sleep 1000 & echo $! >> "$PIDDIR/pids"
echo $$ >> "$PIDDIR/pids"
wait
`

func TestExecTimeoutKillsProcessTree(t *testing.T) {
	piddir := t.TempDir()
	h, _ := newHarness(t, harness.Config{}, execTool(t, "tree", treeScript, map[string]string{"PIDDIR": piddir}))
	start := time.Now()
	r := h.Execute(t.Context(), harness.Call{Tool: "tree", Arguments: json.RawMessage(`{}`), Deadline: start.Add(time.Second)})
	if r.Outcome != protocol.OutcomeTimeout {
		t.Fatalf("result = %+v, want timeout", r)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("Execute took %v for a 1s deadline", el)
	}
	pids := readPids(t, filepath.Join(piddir, "pids"))
	if len(pids) != 3 {
		t.Fatalf("script wrote %d pids, want 3 (it did not get far enough to test the kill)", len(pids))
	}
	for _, pid := range pids {
		testsync.WaitUntil(t, 5*time.Second, fmt.Sprintf("pid %d to die", pid), func() bool { return processGone(pid) })
	}
	if h.Abandoned() != 0 {
		t.Errorf("Abandoned() = %d: exec tools are never abandoned", h.Abandoned())
	}
}

func TestExecCancelKillsGroup(t *testing.T) {
	piddir := t.TempDir()
	h, _ := newHarness(t, harness.Config{}, execTool(t, "tree", treeScript, map[string]string{"PIDDIR": piddir}))
	pidfile := filepath.Join(piddir, "pids")
	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		// Cancel once the tree is up.
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			if data, _ := os.ReadFile(pidfile); strings.Count(string(data), "\n") == 3 {
				break
			}
			time.Sleep(2 * time.Millisecond)
		}
		cancel()
	}()
	r := h.Execute(ctx, harness.Call{Tool: "tree", Arguments: json.RawMessage(`{}`), Deadline: time.Now().Add(time.Minute)})
	if r.Outcome != protocol.OutcomeCancelled {
		t.Fatalf("result = %+v, want cancelled", r)
	}
	pids := readPids(t, pidfile)
	if len(pids) != 3 {
		t.Fatalf("script wrote %d pids, want 3", len(pids))
	}
	for _, pid := range pids {
		testsync.WaitUntil(t, 5*time.Second, fmt.Sprintf("pid %d to die", pid), func() bool { return processGone(pid) })
	}
}

func TestExecGrandchildHoldingStdout(t *testing.T) {
	// The script exits at once but leaves a child that holds stdout open:
	// Execute must not wait for it, and the child must not survive the call.
	piddir := t.TempDir()
	h, _ := newHarness(t, harness.Config{}, execTool(t, "leave",
		`sleep 1000 & echo $! >> "$PIDDIR/pids"; echo done`, map[string]string{"PIDDIR": piddir}))
	start := time.Now()
	r := h.Execute(t.Context(), harness.Call{Tool: "leave", Arguments: json.RawMessage(`{}`), Deadline: start.Add(time.Minute)})
	if r.Outcome != protocol.OutcomeOK || r.Output != "done\n" {
		t.Fatalf("result = %+v, want ok \"done\\n\"", r)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("Execute took %v: it waited on the grandchild's pipe", el)
	}
	for _, pid := range readPids(t, filepath.Join(piddir, "pids")) {
		testsync.WaitUntil(t, 5*time.Second, fmt.Sprintf("pid %d to die", pid), func() bool { return processGone(pid) })
	}
}

func TestExecExitStatusAndStderr(t *testing.T) {
	const canary = "CANARY-stderr-c41e"
	script := `echo "partial output"; echo "` + canary + `" >&2; exit 3`
	for _, logStderr := range []bool{false, true} {
		t.Run(fmt.Sprintf("LogStderr=%v", logStderr), func(t *testing.T) {
			h, logs := newHarness(t, harness.Config{LogStderr: logStderr}, execTool(t, "fail", script, nil))
			r := h.Execute(t.Context(), harness.Call{Tool: "fail", Arguments: json.RawMessage(`{}`)})
			if r.Outcome != protocol.OutcomeFailed || r.ErrorType != "exit status 3" || r.Output != "" {
				t.Fatalf("result = %+v, want failed \"exit status 3\" with no output", r)
			}
			assertNotContains(t, canary, map[string]string{"result": resultText(r)})
			if got := strings.Contains(logs.String(), canary); got != logStderr {
				t.Fatalf("stderr in logs = %v, want %v:\n%s", got, logStderr, logs)
			}
		})
	}
}

func TestExecStderrOnSuccessNotInResult(t *testing.T) {
	const canary = "CANARY-stderr-9d0f"
	h, logs := newHarness(t, harness.Config{}, execTool(t, "warn", `echo out; echo `+canary+` >&2`, nil))
	r := h.Execute(t.Context(), harness.Call{Tool: "warn", Arguments: json.RawMessage(`{}`)})
	if r.Outcome != protocol.OutcomeOK || r.Output != "out\n" {
		t.Fatalf("result = %+v", r)
	}
	assertNotContains(t, canary, map[string]string{"result": resultText(r), "logs": logs.String()})
}

func TestExecSignalled(t *testing.T) {
	h, _ := newHarness(t, harness.Config{}, execTool(t, "selfkill", `kill -KILL $$`, nil))
	r := h.Execute(t.Context(), harness.Call{Tool: "selfkill", Arguments: json.RawMessage(`{}`)})
	if r.Outcome != protocol.OutcomeFailed || r.ErrorType != "signal: killed" {
		t.Fatalf("result = %+v, want failed \"signal: killed\"", r)
	}
}

func TestExecCleanEnvironment(t *testing.T) {
	const canary = "CANARY-env-61aa"
	t.Setenv("TOOLFLEET_TEST_SECRET", canary)
	h, _ := newHarness(t, harness.Config{}, execTool(t, "env", `env`, map[string]string{"GREETING": "hello"}))
	r := h.Execute(t.Context(), harness.Call{Tool: "env", Arguments: json.RawMessage(`{}`)})
	if r.Outcome != protocol.OutcomeOK {
		t.Fatalf("result = %+v", r)
	}
	assertNotContains(t, canary, map[string]string{"tool environment": r.Output})
	vars := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(r.Output), "\n") {
		k, v, _ := strings.Cut(line, "=")
		vars[k] = v
	}
	if vars["PATH"] != os.Getenv("PATH") || vars["GREETING"] != "hello" {
		t.Fatalf("environment = %v, want the worker's PATH and GREETING=hello", vars)
	}
	for k := range vars {
		switch k {
		case "PATH", "GREETING", "PWD", "SHLVL", "_", "OLDPWD": // the last four are the shell's own
		default:
			t.Errorf("unexpected variable %s in the tool's environment", k)
		}
	}
}

func TestExecArgumentsOnStdin(t *testing.T) {
	tool := execTool(t, "cat", `exec cat`, nil)
	tool.Parameters = json.RawMessage(`{"type":"object","properties":{"q":{"type":"string"}}}`)
	h, _ := newHarness(t, harness.Config{}, tool)
	args := `{"q": "it's \"quoted\"; $(rm -rf /) ` + "`x`" + `"}`
	r := h.Execute(t.Context(), harness.Call{Tool: "cat", Arguments: json.RawMessage(args)})
	if r.Outcome != protocol.OutcomeOK || r.Output != args {
		t.Fatalf("result = %+v, want the arguments echoed verbatim", r)
	}
}

func TestExecLargeOutputBoundedMemory(t *testing.T) {
	// 100 MB on stdout: read up to the bound, the rest drained and
	// discarded, memory bounded, the result marked truncated.
	h, _ := newHarness(t, harness.Config{}, execTool(t, "flood", `head -c 100000000 /dev/zero | tr '\0' 'a'`, nil))
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	r := h.Execute(t.Context(), harness.Call{Tool: "flood", Arguments: json.RawMessage(`{}`), Deadline: time.Now().Add(time.Minute)})
	runtime.ReadMemStats(&after)
	if r.Outcome != protocol.OutcomeOK || !r.Truncated {
		t.Fatalf("Outcome=%q Truncated=%v ErrorType=%q, want ok and truncated", r.Outcome, r.Truncated, r.ErrorType)
	}
	if n := len(r.Output); n != harness.DefaultMaxOutputChars {
		t.Errorf("len(Output) = %d, want %d", n, harness.DefaultMaxOutputChars)
	}
	if !strings.HasSuffix(r.Output, protocol.TruncationMarker) {
		t.Error("output lacks the truncation marker")
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 20<<20 {
		t.Fatalf("allocated %d MB reading 100 MB of output, want < 20 MB", alloc>>20)
	}
}

func TestExecOutputTruncatedAtCallBound(t *testing.T) {
	h, _ := newHarness(t, harness.Config{}, execTool(t, "runes", `i=0; while [ $i -lt 100 ]; do printf 'é😀'; i=$((i+1)); done`, nil))
	r := h.Execute(t.Context(), harness.Call{Tool: "runes", Arguments: json.RawMessage(`{}`), MaxOutputChars: 33})
	want := strings.Repeat("é😀", 10) + "é" + protocol.TruncationMarker
	if r.Outcome != protocol.OutcomeOK || !r.Truncated || r.Output != want {
		t.Fatalf("result = %+v, want %q truncated", r, want)
	}
}

func TestExecToolRunDirectly(t *testing.T) {
	tool := execTool(t, "hi", `echo hi`, nil)
	out, err := tool.Run(t.Context(), json.RawMessage(`{}`))
	if err != nil || out != "hi\n" {
		t.Fatalf("Run = %q, %v", out, err)
	}
}
