//go:build linux

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/pkg/loop"
)

// TestTerminalFirstRun is the first run a person makes: the built
// coordinator at a terminal, with a prompt and the bundled demo model. The
// screen shows a status line for each call, the answer to the prompt, and
// no log lines at info; --output json prints one JSON document on stdout.
func TestTerminalFirstRun(t *testing.T) {
	t.Parallel()
	const prompt = "What is 7 times 6? And 2 to the power of 10?"
	env := []string{"PATH=/usr/bin:/bin", "TERM=xterm", "TMPDIR=" + t.TempDir(), "HOME=" + t.TempDir()}

	ctx, cancel := context.WithTimeout(t.Context(), 120*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bins.coordinator, "run", prompt)
	cmd.Env = env
	raw, err := ptyRun(t, cmd)
	screen := string(raw)
	if err != nil {
		t.Fatalf("coordinator run at a terminal: %v\n%s", err, screen)
	}
	for _, want := range []string{"answer: 7 * 6 = 42 and 2 ** 10 = 1024.", "termination: natural"} {
		if !strings.Contains(screen, want) {
			t.Errorf("the screen lacks %q:\n%s", want, screen)
		}
	}
	for _, id := range []string{"demo_1_1_1", "demo_1_1_2"} {
		if !regexp.MustCompile(`✓ calculator ` + id + `: ok in \d+ ms on inproc-1`).MatchString(screen) {
			t.Errorf("no status line of call %s:\n%s", id, screen)
		}
	}
	if regexp.MustCompile(`\bINF\b|"level":"info"`).MatchString(screen) {
		t.Errorf("info log lines on the screen:\n%s", screen)
	}

	// The same run for programs: one JSON document on stdout, logs on
	// stderr.
	var stdout, stderr bytes.Buffer
	cmd = exec.CommandContext(ctx, bins.coordinator, "run", "--output", "json", prompt)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if _, err := ptyRun(t, cmd); err != nil {
		t.Fatalf("coordinator run --output json: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	dec := json.NewDecoder(&stdout)
	var res loop.Result
	if err := dec.Decode(&res); err != nil {
		t.Fatalf("stdout is not a result: %v\n%s", err, stdout.String())
	}
	if _, err := dec.Token(); err == nil {
		t.Errorf("stdout holds more than one JSON document")
	}
	if res.Answer != "7 * 6 = 42 and 2 ** 10 = 1024." || res.TerminationReason != loop.TerminationNatural {
		t.Errorf("result %q %s", res.Answer, res.TerminationReason)
	}
}
