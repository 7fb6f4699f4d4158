package natscli

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
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
const installTimeout = 15 * time.Minute

// errNoGo is returned by [Install] when the go command is unavailable.
var errNoGo = errors.New("the go command is unavailable")

var (
	once    sync.Once
	path    string
	pathErr error
)

// Install returns the path of a nats binary of [Version], building it into
// $(go env GOCACHE)/toolfleet-natscli-v0.5.0 the first time. While it
// builds it writes one line per compiled package to progress (nil for
// none), so a slow first build on a fresh machine shows as a build, not a
// hang. It builds at most once per process; later calls return the first
// call's answer.
//
// Call it before any clock starts: from TestMain (see [Prepare]) or from
// test.sh, never from inside a test that has a deadline running.
func Install(progress io.Writer) (string, error) {
	once.Do(func() { path, pathErr = install(progress) })
	return path, pathErr
}

// Prepare builds the nats CLI for a test binary's TestMain, printing its
// progress to stderr. A failure is not fatal here: the tests that need the
// CLI fail (or skip, without a go command) when they call [Path].
func Prepare() {
	if _, err := Install(prefixWriter{os.Stderr}); err != nil && !errors.Is(err, errNoGo) {
		fmt.Fprintf(os.Stderr, "natscli: %v\n", err)
	}
}

// Path returns the nats binary that [Install] built. It skips the test
// when the go command is unavailable and fails it when the build or the
// version check failed. Packages whose tests use it call [Prepare] in
// TestMain, so the build (minutes on a fresh machine) is over before any
// test starts a deadline.
func Path(t testing.TB) string {
	t.Helper()
	bin, err := Install(nil)
	if errors.Is(err, errNoGo) {
		t.Skipf("the nats CLI %s is built with the go command: %v", Version, err)
	}
	if err != nil {
		t.Fatalf("the nats CLI %s: %v", Version, err)
	}
	return bin
}

func install(progress io.Writer) (string, error) {
	goCmd, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("%w: %v", errNoGo, err)
	}
	out, err := exec.Command(goCmd, "env", "GOCACHE").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOCACHE: %w", err)
	}
	cache := strings.TrimSpace(string(out))
	if cache == "" || cache == "off" {
		cache = filepath.Join(os.TempDir(), "toolfleet-gocache")
	}
	dir := filepath.Join(cache, "toolfleet-natscli-"+Version)
	bin := filepath.Join(dir, "nats")
	if checkVersion(bin) == nil {
		return bin, nil
	}
	if progress == nil {
		progress = io.Discard
	}
	fmt.Fprintf(progress, "building the nats CLI %s with go install (the first time only; minutes on a fresh machine)\n", Version)
	start := time.Now()
	if err := build(goCmd, dir, bin, progress); err != nil {
		return "", fmt.Errorf("installing: %w", err)
	}
	if err := checkVersion(bin); err != nil {
		return "", fmt.Errorf("the binary just built: %w", err)
	}
	fmt.Fprintf(progress, "built the nats CLI %s in %s: %s\n", Version, time.Since(start).Round(time.Second), bin)
	return bin, nil
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

// build runs go install into a private directory and renames the binary
// into place, so concurrent test processes never see a half-written file.
// go install -v names each package as it compiles; those lines go to
// progress.
func build(goCmd, dir, bin string, progress io.Writer) error {
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
	cmd := exec.CommandContext(ctx, goCmd, "install", "-v", pkg+"@"+Version)
	cmd.Dir = tmp // outside any module: "go install pkg@version" builds it on its own
	cmd.Env = append(os.Environ(), "GOBIN="+tmp, "GOFLAGS=-buildvcs=false", "GOWORK=off")
	// Both streams go through the pipe: only the scanner below writes out.
	var out bytes.Buffer
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			out.WriteString(sc.Text() + "\n")
			fmt.Fprintf(progress, "  %s\n", sc.Text())
		}
	}()
	err = cmd.Run()
	pw.Close()
	<-done
	if err != nil {
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

// prefixWriter marks each write as the natscli build's.
type prefixWriter struct{ w io.Writer }

func (p prefixWriter) Write(b []byte) (int, error) {
	if _, err := fmt.Fprintf(p.w, "natscli: %s", b); err != nil {
		return 0, err
	}
	return len(b), nil
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
