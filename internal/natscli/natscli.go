package natscli

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// Version is the natscli release the tests and the operator documentation
// use. v0.5.1 is known bad; do not move to it.
const Version = "v0.5.0"

const pkg = "github.com/nats-io/natscli/nats"

// installTimeout bounds one build of natscli.
const installTimeout = 10 * time.Minute

var (
	mu   sync.Mutex
	path string
)

// Path returns the path of a nats binary of [Version], building it into
// $(go env GOCACHE)/toolfleet-natscli-v0.5.0 if it is not there yet. It skips
// the test when the go command is unavailable and fails it when the build
// or the version check fails.
func Path(t testing.TB) string {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	if path != "" {
		return path
	}
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("the nats CLI %s is built with the go command, which is unavailable: %v", Version, err)
	}
	out, err := exec.Command(goCmd, "env", "GOCACHE").Output()
	if err != nil {
		t.Fatalf("go env GOCACHE: %v", err)
	}
	cache := strings.TrimSpace(string(out))
	if cache == "" || cache == "off" {
		cache = filepath.Join(os.TempDir(), "toolfleet-gocache")
	}
	dir := filepath.Join(cache, "toolfleet-natscli-"+Version)
	bin := filepath.Join(dir, "nats")
	if checkVersion(bin) != nil {
		if err := install(goCmd, dir, bin); err != nil {
			t.Fatalf("installing the nats CLI %s: %v", Version, err)
		}
		if err := checkVersion(bin); err != nil {
			t.Fatalf("the nats CLI just built: %v", err)
		}
	}
	path = bin
	return path
}

// checkVersion runs "bin --version" and compares it with [Version].
func checkVersion(bin string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "--version").CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s --version: %w", bin, err)
	}
	if got := strings.TrimSpace(string(out)); strings.TrimPrefix(got, "v") != strings.TrimPrefix(Version, "v") {
		return fmt.Errorf("%s --version says %q, want %s", bin, got, Version)
	}
	return nil
}

// install builds natscli into a private directory and renames the binary
// into place, so concurrent test processes never see a half-written file.
func install(goCmd, dir, bin string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(dir, "install-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	ctx, cancel := context.WithTimeout(context.Background(), installTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, goCmd, "install", pkg+"@"+Version)
	cmd.Dir = tmp // outside any module: "go install pkg@version" builds it on its own
	cmd.Env = append(os.Environ(), "GOBIN="+tmp, "GOFLAGS=-buildvcs=false", "GOWORK=off")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go install %s@%s: %w\n%s", pkg, Version, err, tail(out.String(), 4000))
	}
	return os.Rename(filepath.Join(tmp, "nats"), bin)
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

// Env returns the environment for running the nats CLI in a test: the
// process's own, with a private HOME and XDG_CONFIG_HOME so that no saved
// nats context of the machine's user is read or written, and NATS_CONTEXT,
// NATS_URL, NATS_USER and NATS_PASSWORD removed.
func Env(t testing.TB) []string {
	t.Helper()
	home := t.TempDir()
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "HOME", "XDG_CONFIG_HOME", "NATS_CONTEXT", "NATS_URL", "NATS_USER", "NATS_PASSWORD", "NATS_CREDS", "NATS_NKEY":
			continue
		}
		env = append(env, kv)
	}
	return append(env, "HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"))
}
