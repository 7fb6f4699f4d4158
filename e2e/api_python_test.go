package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestAPIPythonExample runs examples/python/run_and_stream.py (the
// standard library only) against the real processes of a fleet on a
// server started from deploy/nats-server.conf: a serving coordinator
// (coordinator user, the demo model), a toolworker (worker user) and
// "coordinator console --nats-url" (no NATS identity of its own). The
// program submits one run twice with one Idempotency-Key and gets one run,
// streams its events as the operator until the run waits for an approval,
// approves, reconnects with Last-Event-ID and checks against a full
// stream that nothing was missed or repeated, then reads the result as
// the client. Neither user's password reaches the console's log.
func TestAPIPythonExample(t *testing.T) {
	t.Parallel()
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not installed: the Python example needs it")
	}
	srv := startApprovalServer(t)
	url := srv.ClientURL()
	serve := startProcEnv(t, "serve", approvalEnv(t, url, "coordinator"), bins.coordinator, "serve", "--name", "c1")
	worker := startProcEnv(t, "worker", approvalEnv(t, url, "worker"), bins.toolworker, "--builtin", "calculator")
	console := startProcEnv(t, "console", []string{"NATS_URL=" + url}, bins.coordinator, "console", "--addr", "127.0.0.1:0")
	serve.waitLog(30*time.Second, `"serving runs"`)
	worker.waitLog(30*time.Second, `"worker started"`)
	console.waitLog(30*time.Second, `"serving the HTTP API"`)
	addr, _ := console.logLines(func(m map[string]any) bool { return m["message"] == "serving the HTTP API" })[0]["addr"].(string)

	dir := t.TempDir()
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "TOOLFLEET_API=http://" + addr}
	for _, user := range []string{"client", "operator"} {
		file := filepath.Join(dir, user+".netrc")
		host := strings.Split(addr, ":")[0]
		if err := os.WriteFile(file, []byte("machine "+host+" login "+user+" password "+approvalPasswords[user]+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		env = append(env, "TOOLFLEET_"+strings.ToUpper(user)+"_NETRC="+file)
	}
	cmd := exec.CommandContext(t.Context(), python, "../examples/python/run_and_stream.py")
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("run_and_stream.py: %v\n%s", err, out)
	}
	for _, want := range []string{"sent twice, one run", "nothing missed, nothing twice", "answer: 6 * 7 = 42.", "approval: approved by operator"} {
		if !strings.Contains(string(out), want) {
			t.Fatalf("run_and_stream.py said no %q:\n%s", want, out)
		}
	}
	t.Logf("run_and_stream.py:\n%s", out)
	for _, user := range []string{"client", "operator"} {
		if strings.Contains(console.log(), approvalPasswords[user]) {
			t.Fatalf("the %s's password is in the console's log", user)
		}
	}
}
