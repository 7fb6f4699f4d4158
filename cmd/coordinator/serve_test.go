package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolfleet/toolfleet/internal/natstest"
	"github.com/toolfleet/toolfleet/internal/testsync"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// startServe runs "coordinator serve args..." in process until the test
// ends, and returns its log and a func that stops it (as SIGTERM does) and
// returns its exit status.
func startServe(t *testing.T, args ...string) (*testsync.Buffer, func() int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	logs := &testsync.Buffer{}
	done := make(chan int, 1)
	go func() { done <- serveCommand(ctx, append(args, "--shutdown-grace", "5s"), &testsync.Buffer{}, logs) }()
	var once sync.Once
	code := -1
	stop := func() int {
		once.Do(func() {
			cancel()
			select {
			case code = <-done:
			case <-time.After(20 * time.Second):
				t.Errorf("serve did not stop within 20s; log:\n%s", logs.String())
			}
		})
		return code
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("serve log:\n%s", logs.String())
		}
	})
	natstest.WaitFor(t, 15*time.Second, func() error {
		if strings.Contains(logs.String(), `"serving runs"`) {
			return nil
		}
		select {
		case code := <-done:
			t.Fatalf("serve exited %d before serving; log:\n%s", code, logs.String())
		default:
		}
		return fmt.Errorf("not serving yet")
	})
	return logs, stop
}

// submit runs "coordinator submit args..." in process.
func submit(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb testsync.Buffer
	code = submitCommand(t.Context(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestServeAndSubmit(t *testing.T) {
	srv := natstest.Start(t)
	url := srv.ClientURL()
	_, stop := startServe(t, "--nats-url", url, "--workers", "1", "--name", "cmd-c1", "--max-rounds", "3")

	t.Run("submit prints the run id", func(t *testing.T) {
		code, out, stderr := submit(t, "--nats-url", url, "what is 6 * 7?")
		if code != exitOK || !protocol.ValidToken(strings.TrimSpace(out)) {
			t.Fatalf("exit %d, stdout %q, want a run id; stderr:\n%s", code, out, stderr)
		}
	})
	t.Run("submit of a stored submission id says the request was not submitted", func(t *testing.T) {
		code, first, stderr := submit(t, "--nats-url", url, "--id", "order-1234", "what is 6 * 7?")
		if code != exitOK || strings.Contains(stderr, "already stored") {
			t.Fatalf("first submit: exit %d, stderr:\n%s", code, stderr)
		}
		code, again, stderr := submit(t, "--nats-url", url, "--id", "order-1234", "what is 2 + 2?")
		if code != exitOK || again != first {
			t.Fatalf("second submit: exit %d, run %q, want %q", code, again, first)
		}
		if !strings.Contains(stderr, `submission "order-1234" was already stored`) || !strings.Contains(stderr, "was not submitted") {
			t.Fatalf("second submit's stderr does not say its request was not submitted:\n%s", stderr)
		}
	})
	t.Run("submit --wait prints the stored result", func(t *testing.T) {
		code, out, stderr := submit(t, "--nats-url", url, "--wait", "--output", "json", "what is 6 * 7?")
		if code != exitOK {
			t.Fatalf("exit %d; stderr:\n%s", code, stderr)
		}
		var res protocol.RunResult
		if err := json.Unmarshal([]byte(out), &res); err != nil {
			t.Fatalf("stdout is not a run result: %v\n%s", err, out)
		}
		if res.Coordinator != "cmd-c1" || res.TerminationReason != "natural" || !strings.Contains(res.Answer, "6 * 7 = 42") {
			t.Fatalf("result = %+v", res)
		}
	})
	t.Run("a request above the ceiling is clamped", func(t *testing.T) {
		code, out, stderr := submit(t, "--nats-url", url, "--wait", "--max-rounds", "1000000", demoPrompt)
		if code != exitOK {
			t.Fatalf("exit %d; stderr:\n%s", code, stderr)
		}
		for _, want := range []string{"termination: natural; rounds 3", "served by cmd-c1 (attempt 1); limits: max rounds 3,",
			"lowered to the coordinator's ceiling: max_rounds"} {
			if !strings.Contains(out, want) {
				t.Errorf("stdout lacks %q:\n%s", want, out)
			}
		}
	})
	t.Run("a request may lower a limit", func(t *testing.T) {
		code, out, stderr := submit(t, "--nats-url", url, "--wait", "--max-rounds", "2", demoPrompt)
		if code != exitMaxRounds || !strings.Contains(out, "termination: max_rounds; rounds 2") {
			t.Fatalf("exit %d, want %d; stdout:\n%s\nstderr:\n%s", code, exitMaxRounds, out, stderr)
		}
	})
	t.Run("submit --messages continues an Anthropic transcript left open by a crash", func(t *testing.T) {
		// The run that wrote it stopped before answering send_1.
		code, out, stderr := submit(t, "--nats-url", url, "--wait", "--output", "json", "--messages", writeFile(t, `[
		  {"role": "user", "content": "Compute 2+2 and mail it to bob."},
		  {"role": "assistant", "content": [
		    {"type": "tool_use", "id": "calc_1", "name": "calculator", "input": {"expression": "2+2"}},
		    {"type": "tool_use", "id": "send_1", "name": "send_email", "input": {"to": "bob"}}]},
		  {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "calc_1", "content": "4"}]}]`))
		if code != exitOK {
			t.Fatalf("exit %d; stdout:\n%s\nstderr:\n%s", code, out, stderr)
		}
		var res struct {
			Messages []loop.Message `json:"messages"`
		}
		if err := json.Unmarshal([]byte(out), &res); err != nil {
			t.Fatal(err)
		}
		if len(res.Messages) < 4 || res.Messages[3].ToolCallID != "send_1" ||
			!strings.Contains(res.Messages[3].Content, "may or may not have taken effect; check before calling it again") {
			t.Fatalf("send_1 not answered outcome_unknown: %+v", res.Messages)
		}
	})
	t.Run("submit --class batch publishes the run's calls as its client's batch calls", func(t *testing.T) {
		nc, err := nats.Connect(url)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		calls, err := nc.SubscribeSync("fleet.call.>")
		if err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		// acme submits a batch run, bob one of the default class.
		for _, c := range [][]string{{"--client", "acme", "--class", "batch"}, {"--client", "bob"}} {
			if code, out, stderr := submit(t, append(c, "--nats-url", url, "--wait", demoPrompt)...); code != exitOK {
				t.Fatalf("%v: exit %d; stdout:\n%s\nstderr:\n%s", c, code, out, stderr)
			}
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		seen := map[string]int{}
		for n, _, _ := calls.Pending(); n > 0; n, _, _ = calls.Pending() {
			m, err := calls.NextMsg(time.Second)
			if err != nil {
				t.Fatal(err)
			}
			parts := strings.Split(m.Subject, ".")
			seen[strings.Join(parts[len(parts)-2:], ".")]++
		}
		if seen["batch.acme"] == 0 || seen["interactive.bob"] == 0 || len(seen) != 2 {
			t.Fatalf("calls published per class and client %v, want batch.acme and interactive.bob only", seen)
		}
		if code, _, stderr := submit(t, "--nats-url", url, "--class", "urgent", demoPrompt); code != exitUsage {
			t.Fatalf("--class urgent: exit %d, want %d; stderr:\n%s", code, exitUsage, stderr)
		}
	})
	t.Run("a refused request exits 2", func(t *testing.T) {
		code, out, stderr := submit(t, "--nats-url", url, "--wait", "--output", "json", "--messages", writeFile(t, "[]"))
		if code != exitUsage || !strings.Contains(stderr, `invalid_field: field "messages"`) || !strings.Contains(out, `"code": "invalid_field"`) {
			t.Fatalf("exit %d; stdout:\n%s\nstderr:\n%s", code, out, stderr)
		}
	})
	if code := stop(); code != exitOK {
		t.Fatalf("serve exited %d after SIGTERM, want 0", code)
	}
	// With no coordinator serving, a run is still accepted (stored), and
	// a retry with the same submission id names the same run.
	code, out1, stderr := submit(t, "--nats-url", url, "--timeout", "10s", "--id", "again1", "hello")
	if code != exitOK {
		t.Fatalf("submit after shutdown: exit %d, stderr:\n%s", code, stderr)
	}
	if code, out2, stderr := submit(t, "--nats-url", url, "--id", "again1", "hello"); code != exitOK || out2 != out1 {
		t.Fatalf("resubmitting: exit %d, run %q, want %q; stderr:\n%s", code, out2, out1, stderr)
	}
}

func writeFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "file.json")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestServeEmbeddedLogsItsURL starts serve with no server: it starts the
// embedded one and logs its URL, which clients then use.
func TestServeEmbeddedLogsItsURL(t *testing.T) {
	t.Setenv("NATS_URL", "")
	t.Setenv("TMPDIR", t.TempDir())
	logs, stop := startServe(t, "--name", "embedded-c")
	m := regexp.MustCompile(`"nats_url":"(nats://[^"]+)"`).FindStringSubmatch(logs.String())
	if m == nil {
		t.Fatalf("serve did not log the embedded server's URL:\n%s", logs.String())
	}
	// It listens with credentials drawn at start: refused without them,
	// served with the credentials file's, which are never logged.
	if code, _, _ := submit(t, "--nats-url", m[1], "--timeout", "2s", "demo"); code == exitOK {
		t.Fatal("a submission without the credentials was served")
	}
	cm := regexp.MustCompile(`"credentials_file":"([^"]+)"`).FindStringSubmatch(logs.String())
	if cm == nil {
		t.Fatalf("serve did not log its credentials file:\n%s", logs.String())
	}
	env, err := os.ReadFile(cm[1])
	if err != nil {
		t.Fatal(err)
	}
	creds := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(env)), "\n") {
		k, v, _ := strings.Cut(line, "=")
		creds[k] = v
	}
	if creds["NATS_URL"] != m[1] || creds["NATS_USER"] == "" || len(creds["NATS_PASSWORD"]) < 32 {
		t.Fatalf("credentials file %s:\n%s", cm[1], env)
	}
	if strings.Contains(logs.String(), creds["NATS_PASSWORD"]) {
		t.Fatal("serve logged the generated password")
	}
	code, out, stderr := submit(t, "--nats-url", m[1], "--user", creds["NATS_USER"], "--password", creds["NATS_PASSWORD"], "--wait", demoPrompt)
	if code != exitOK || !strings.Contains(out, "served by embedded-c") || !strings.Contains(out, "1150") {
		t.Fatalf("exit %d; stdout:\n%s\nstderr:\n%s", code, out, stderr)
	}
	if code := stop(); code != exitOK {
		t.Fatalf("serve exited %d, want 0", code)
	}
}
