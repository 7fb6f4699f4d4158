package procsec_test

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/toolfleet/toolfleet/internal/procsec"
)

const canary = "tf-canary-5b1c9e7d0f"

// TestMain lets the test binary act as a process that holds credentials
// (PROCSEC_HELPER=1): it takes its secrets, hardens itself and runs a
// "tool" that tries to read them from /proc/$PPID like an exec tool of a
// worker would.
func TestMain(m *testing.M) {
	if os.Getenv("PROCSEC_HELPER") == "1" {
		os.Exit(helper())
	}
	os.Exit(m.Run())
}

func helper() int {
	if got := procsec.Getenv("TF_TEST_PASSWORD"); got != canary {
		fmt.Println("Getenv before Take:", got)
	}
	procsec.Take()
	if os.Getenv("TF_TEST_PASSWORD") != "" || procsec.Getenv("TF_TEST_PASSWORD") != canary {
		fmt.Println("FAIL: Take did not move the secret")
		return 1
	}
	if os.Getenv("PROCSEC_HARDEN") == "1" {
		if err := procsec.Harden(); err != nil {
			fmt.Println("FAIL: Harden:", err)
			return 1
		}
	}
	// The "tool": same uid, reads its parent's environment and command line.
	tool := exec.Command("/bin/sh", "-c", `cat /proc/$PPID/environ; echo " environ-exit=$?"; cat /proc/$PPID/cmdline; echo " cmdline-exit=$?"`)
	tool.Env = []string{"PATH=/usr/bin:/bin"}
	out, _ := tool.CombinedOutput()
	os.Stdout.Write(out)
	return 0
}

// runHelper starts the test binary as a credential-holding process, as
// uid 65534 when the test runs as root (root may read any process's
// /proc files, so only another uid shows what non-dumpable does).
func runHelper(t *testing.T, harden bool) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	if os.Geteuid() == 0 {
		// The build directory is private to root: run a copy another user may execute.
		dir, err := os.MkdirTemp("", "procsec-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		cp := filepath.Join(dir, "helper")
		copyFile(t, exe, cp)
		cmd = exec.Command(cp, "-test.run=^$")
		cmd.Dir = dir
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	}
	cmd.Env = []string{"PATH=/usr/bin:/bin", "PROCSEC_HELPER=1", "TF_TEST_PASSWORD=" + canary}
	if harden {
		cmd.Env = append(cmd.Env, "PROCSEC_HARDEN=1")
	}
	out, err := cmd.CombinedOutput()
	if err != nil || strings.Contains(string(out), "FAIL") {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	return string(out)
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// An attack: a tool running as its worker's uid reads the worker's
// environment from /proc/$PPID/environ. Take overwrites the secret in the
// environment block, and Harden closes the file altogether.
func TestToolCannotReadItsParentsSecrets(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Log("not root: the tool runs as the test's own uid")
	}
	out := runHelper(t, true)
	if strings.Contains(out, canary) {
		t.Fatalf("the tool read the canary:\n%s", out)
	}
	if !strings.Contains(out, "environ-exit=1") {
		t.Fatalf("the tool could read /proc/$PPID/environ of a hardened process:\n%s", out)
	}

	// Without Harden the file is readable, but the secret is gone from it.
	out = runHelper(t, false)
	if strings.Contains(out, canary) {
		t.Fatalf("the tool read the canary from an unhardened process after Take:\n%s", out)
	}
	if !strings.Contains(out, "environ-exit=0") || !strings.Contains(out, "PROCSEC_HELPER=1") {
		t.Fatalf("want /proc/$PPID/environ readable (the scrub is what protects here):\n%s", out)
	}
}

func TestIsSecretName(t *testing.T) {
	for _, n := range []string{"NATS_PASSWORD", "NATS_TOKEN", "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "X_SECRET", "nats_password", "TOOLFLEET_MCP_TOKENS"} {
		if !procsec.IsSecretName(n) {
			t.Errorf("IsSecretName(%q)=false", n)
		}
	}
	for _, n := range []string{"NATS_URL", "NATS_USER", "NATS_CREDS", "PATH", "OPENAI_BASE_URL"} {
		if procsec.IsSecretName(n) {
			t.Errorf("IsSecretName(%q)=true", n)
		}
	}
}

func TestCommandLineSecrets(t *testing.T) {
	tests := []struct {
		args []string
		want []string
	}{
		{[]string{"--password", "x", "--nats-url", "nats://a:4222"}, []string{"--password"}},
		{[]string{"-password=x"}, []string{"-password"[1:] + ""}},
		{[]string{"--nats-url", "nats://u:p@h:4222"}, []string{"--nats-url"}},
		{[]string{"--nats-url=nats://h:1,nats://u:p@h:2"}, []string{"--nats-url"}},
		{[]string{"--nats-url", "nats://u@h:4222", "--user", "u"}, nil},
		{[]string{"run", "nats://u:p@h prompt"}, nil},
		{[]string{"--", "--password"}, nil},
	}
	for _, tt := range tests {
		got := procsec.CommandLineSecrets(tt.args)
		want := tt.want
		if len(want) == 1 && !strings.HasPrefix(want[0], "--") {
			want = []string{"--" + want[0]}
		}
		if !slices.Equal(got, want) {
			t.Errorf("CommandLineSecrets(%q)=%q, want %q", tt.args, got, want)
		}
	}
}

func FuzzCommandLineSecrets(f *testing.F) {
	f.Add("--password x --nats-url nats://u:p@h:4222")
	f.Fuzz(func(t *testing.T, s string) {
		for _, name := range procsec.CommandLineSecrets(strings.Fields(s)) {
			if strings.Contains(name, "=") {
				t.Fatalf("a finding carries a value: %q", name)
			}
		}
	})
}
