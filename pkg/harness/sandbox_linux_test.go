package harness_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/internal/testsync"
	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// TestMain lets the test binary act as a worker process
// (HARNESS_TEST_WORKER=manifest path) that runs the manifest's first tool
// once, so that a test can kill it with SIGKILL mid-call.
func TestMain(m *testing.M) {
	if path := os.Getenv("HARNESS_TEST_WORKER"); path != "" {
		tools, err := harness.LoadManifest(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		h, err := harness.New(harness.Config{}, tools[0])
		if err != nil {
			os.Exit(2)
		}
		h.Execute(context.Background(), harness.Call{Tool: protocol.ToolName(tools[0].Name), Arguments: json.RawMessage(`{}`), Deadline: time.Now().Add(time.Hour)})
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// shTool returns the manifest path and the tool of a manifest entry that
// runs script with /bin/sh -c (readable and executable by any user), plus
// the extra fields.
func shTool(t *testing.T, name, script string, extra map[string]any) (string, harness.Tool) {
	t.Helper()
	entry := map[string]any{"name": name, "command": []string{"/bin/sh", "-c", script}, "timeout": "1h"}
	for k, v := range extra {
		entry[k] = v
	}
	manifest, _ := json.Marshal(map[string]any{"tools": []any{entry}})
	path := filepath.Join(t.TempDir(), "tools.json")
	if err := os.WriteFile(path, manifest, 0o644); err != nil {
		t.Fatal(err)
	}
	tools, err := harness.LoadManifest(path)
	if err != nil {
		t.Fatalf("LoadManifest: %v", err)
	}
	return path, tools[0]
}

// escapeScript starts a process that leaves the tool's process group and
// session (setsid) and records its pid in $PIDDIR/pids, then waits for the
// record and runs rest.
func escapeScript(piddir, rest string) string {
	return `setsid /bin/sh -c 'echo $$ >> "` + piddir + `/pids"; exec sleep 1000' </dev/null >/dev/null 2>&1 &
while [ ! -s "` + piddir + `/pids" ]; do sleep 0.01; done
` + rest
}

// An attack: an exec tool daemonizes (setsid) to outlive its call. The
// process is found and killed when the tool exits, and the call is not a
// clean success: failed, logged and counted.
func TestExecSetsidEscapeIsKilledAndReported(t *testing.T) {
	piddir := t.TempDir()
	_, tool := shTool(t, "daemon", escapeScript(piddir, "echo done"), nil)
	h, logs := newHarness(t, harness.Config{}, tool)
	r := h.Execute(t.Context(), harness.Call{Tool: "daemon", Arguments: json.RawMessage(`{}`), Deadline: time.Now().Add(time.Minute)})
	if r.Outcome != protocol.OutcomeFailed || r.ErrorType != "harness.EscapedProcessGroup" {
		t.Fatalf("result = %+v, want failed harness.EscapedProcessGroup", r)
	}
	pids := readPids(t, filepath.Join(piddir, "pids"))
	for _, pid := range pids {
		testsync.WaitUntil(t, 10*time.Second, fmt.Sprintf("escaped pid %d to die", pid), func() bool { return processGone(pid) })
	}
	if h.Escaped() != 1 {
		t.Errorf("Escaped() = %d, want 1", h.Escaped())
	}
	if !strings.Contains(logs.String(), "left its process group") {
		t.Errorf("no warning logged:\n%s", logs)
	}
}

// The same escape, killed at the call's deadline while the tool still
// runs.
func TestExecSetsidEscapeIsKilledAtTheDeadline(t *testing.T) {
	piddir := t.TempDir()
	_, tool := shTool(t, "daemon", escapeScript(piddir, "exec sleep 1000"), nil)
	h, _ := newHarness(t, harness.Config{}, tool)
	r := h.Execute(t.Context(), harness.Call{Tool: "daemon", Arguments: json.RawMessage(`{}`), Deadline: time.Now().Add(2 * time.Second)})
	if r.Outcome != protocol.OutcomeTimeout {
		t.Fatalf("result = %+v, want timeout", r)
	}
	for _, pid := range readPids(t, filepath.Join(piddir, "pids")) {
		testsync.WaitUntil(t, 10*time.Second, fmt.Sprintf("escaped pid %d to die", pid), func() bool { return processGone(pid) })
	}
}

// The same escape, when the worker itself is killed with SIGKILL mid-call.
func TestExecSetsidEscapeDiesWithTheWorker(t *testing.T) {
	piddir := t.TempDir()
	manifest, _ := shTool(t, "daemon", escapeScript(piddir, "exec sleep 1000"), nil)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	worker := exec.Command(exe, "-test.run=^$")
	worker.Env = append(os.Environ(), "HARNESS_TEST_WORKER="+manifest)
	if err := worker.Start(); err != nil {
		t.Fatal(err)
	}
	pidfile := filepath.Join(piddir, "pids")
	testsync.WaitUntil(t, 30*time.Second, "the escaped process to start", func() bool {
		b, _ := os.ReadFile(pidfile)
		return strings.HasSuffix(string(b), "\n")
	})
	if err := worker.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	worker.Wait()
	for _, pid := range readPids(t, pidfile) {
		testsync.WaitUntil(t, 10*time.Second, fmt.Sprintf("escaped pid %d to die with the worker", pid), func() bool { return processGone(pid) })
	}
}

// The manifest's limits hold in the tool's process, by the kernel's own
// account of them (/proc/self/limits of a process the tool started, so
// they are inherited too).
func TestExecLimitsApply(t *testing.T) {
	limits := map[string]any{"memory_bytes": 512 << 20, "cpu_seconds": 7, "processes": 500, "open_files": 8}
	_, tool := shTool(t, "limits", `cat /proc/self/limits`, map[string]any{"limits": limits})
	h, _ := newHarness(t, harness.Config{}, tool)
	r := h.Execute(t.Context(), harness.Call{Tool: "limits", Arguments: json.RawMessage(`{}`), Deadline: time.Now().Add(time.Minute)})
	if r.Outcome != protocol.OutcomeOK {
		t.Fatalf("result = %+v", r)
	}
	for name, want := range map[string]string{
		"Max address space": "536870912 536870912",
		"Max cpu time":      "7 8",
		"Max processes":     "500 500",
		"Max open files":    "8 8",
	} {
		if !hasLimit(r.Output, name, want) {
			t.Errorf("%s: want %s in\n%s", name, want, r.Output)
		}
	}
}

// A CPU-bound tool is stopped by its CPU limit, not only by its deadline.
func TestExecCPULimitStopsASpinningTool(t *testing.T) {
	_, tool := shTool(t, "spin", `while :; do :; done`, map[string]any{"limits": map[string]any{"cpu_seconds": 1}})
	h, _ := newHarness(t, harness.Config{}, tool)
	r := h.Execute(t.Context(), harness.Call{Tool: "spin", Arguments: json.RawMessage(`{}`), Deadline: time.Now().Add(2 * time.Minute)})
	if r.Outcome != protocol.OutcomeFailed || (r.ErrorType != "signal: CPU time limit exceeded" && r.ErrorType != "signal: killed") {
		t.Fatalf("result = %+v, want failed by SIGXCPU or SIGKILL", r)
	}
}

// hasLimit reports whether /proc/self/limits text has the named limit with
// soft and hard values want.
func hasLimit(text, name, want string) bool {
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, name) {
			f := strings.Fields(strings.TrimPrefix(line, name))
			return len(f) >= 2 && f[0]+" "+f[1] == want
		}
	}
	return false
}

// A manifest's "user" runs the tool as that user (here nobody), so that it
// cannot read the worker's files or /proc entries.
func TestExecRunsAsAnotherUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("switching users needs root; this test runs as uid", os.Geteuid())
	}
	_, tool := shTool(t, "whoami", `id -u; id -g; cat /proc/$PPID/environ >/dev/null 2>&1 || echo no-parent-environ`,
		map[string]any{"user": "65534", "group": "65534"})
	h, _ := newHarness(t, harness.Config{}, tool)
	r := h.Execute(t.Context(), harness.Call{Tool: "whoami", Arguments: json.RawMessage(`{}`), Deadline: time.Now().Add(time.Minute)})
	if r.Outcome != protocol.OutcomeOK || r.Output != "65534\n65534\nno-parent-environ\n" {
		t.Fatalf("result = %+v, want uid and gid 65534 and no access to the supervisor's environ", r)
	}
}

// A manifest that switches users is refused at load by a worker that may
// not switch.
func TestManifestUserNeedsRoot(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("runs as root, which may switch users: the refusal needs a non-root worker")
	}
	manifest, _ := json.Marshal(map[string]any{"tools": []any{map[string]any{"name": "x", "command": []string{"/bin/true"}, "user": "65534"}}})
	if _, err := harness.ParseManifest(manifest); err == nil || !strings.Contains(err.Error(), "user") {
		t.Fatalf("ParseManifest = %v, want a refusal naming the user field", err)
	}
}
