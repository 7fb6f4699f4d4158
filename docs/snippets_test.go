// Package docs holds the operator documentation and the test that runs it:
// every shell snippet of README.md and docs/*.md is run, in order, page by
// page, against a fleet started from the shipped deploy/nats-server.conf.
package docs

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/internal/natscli"
)

// setupPage is the page whose snippets set up every role; they run before
// the snippets of every other page.
const setupPage = "docs/setup.md"

// notYetRun are pages whose snippets are not yet run as written, with the
// reason: each of their snippets is reported skipped with it.
var notYetRun = map[string]string{
	"docs/operations.md": "the page is rewritten for its roles once the traffic stream of its own lands",
}

// snippetTimeout bounds one snippet, so that a snippet that hangs fails
// with its output instead of stalling the run; it is no measure of speed.
const snippetTimeout = 2 * time.Minute

// snippet is one ```sh or ```bash block of a page.
type snippet struct {
	page string // path from the repository root, e.g. docs/serving.md
	line int    // line of the opening fence
	text string
	skip string // why it is not run; empty: it runs
}

// name is the snippet's page and line, e.g. docs/serving.md:24.
func (s snippet) name() string { return fmt.Sprintf("%s:%d", s.page, s.line) }

var (
	fenceRE = regexp.MustCompile("^([ \t]*)```(sh|bash)[ \t]*$")
	skipRE  = regexp.MustCompile(`^\s*<!--\s*snippet:\s*skip\s*\((.+)\)\s*-->\s*$`)
)

// snippets returns the shell snippets of the markdown file at root/page,
// each with the reason it is skipped when the line before its fence (blank
// lines aside) is a `<!-- snippet: skip (reason) -->` comment.
func snippets(root, page string) ([]snippet, error) {
	f, err := os.Open(filepath.Join(root, page))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var (
		out    []snippet
		cur    *snippet
		indent string
		skip   string
		body   strings.Builder
		n      int
	)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		n++
		line := sc.Text()
		if cur != nil {
			if strings.TrimSpace(line) == "```" {
				cur.text = body.String()
				out = append(out, *cur)
				cur = nil
				continue
			}
			body.WriteString(strings.TrimPrefix(line, indent))
			body.WriteByte('\n')
			continue
		}
		if m := fenceRE.FindStringSubmatch(line); m != nil {
			cur, indent = &snippet{page: page, line: n, skip: skip}, m[1]
			body.Reset()
			skip = ""
			continue
		}
		if m := skipRE.FindStringSubmatch(line); m != nil {
			skip = m[1]
		} else if strings.TrimSpace(line) != "" {
			skip = ""
		}
	}
	if cur != nil {
		return nil, fmt.Errorf("%s:%d: the snippet is never closed", page, cur.line)
	}
	return out, sc.Err()
}

// pages are the pages whose snippets the test runs, README.md first.
func pages(t *testing.T, root string) []string {
	t.Helper()
	md, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	out := []string{"README.md"}
	for _, p := range md {
		rel, _ := filepath.Rel(root, p)
		out = append(out, rel)
	}
	return out
}

// bin is the directory with the binaries the snippets run (coordinator,
// toolworker, nats), built once by TestMain.
var bin string

func TestMain(m *testing.M) {
	flag.Parse()
	if !testing.Short() {
		natscli.Prepare()
	}
	code, err := buildAndRun(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "docs:", err)
		os.Exit(1)
	}
	os.Exit(code)
}

func buildAndRun(m *testing.M) (int, error) {
	dir, err := os.MkdirTemp("", "toolfleet-docs-bin-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	if testing.Short() {
		return m.Run(), nil
	}
	build := exec.Command("go", "build", "-o", dir, "../cmd/coordinator", "../cmd/toolworker")
	if out, err := build.CombinedOutput(); err != nil {
		return 0, fmt.Errorf("building the commands: %v\n%s", err, out)
	}
	build = exec.Command("go", "build", "-o", filepath.Join(dir, "nats-server"), "github.com/nats-io/nats-server/v2")
	if out, err := build.CombinedOutput(); err != nil {
		return 0, fmt.Errorf("building nats-server: %v\n%s", err, out)
	}
	nats, err := natscli.Install(nil)
	if err != nil {
		return 0, fmt.Errorf("the nats CLI: %w", err)
	}
	if err := os.Symlink(nats, filepath.Join(dir, "nats")); err != nil {
		return 0, err
	}
	bin = dir
	return m.Run(), nil
}

// TestSnippets runs every page's snippets against a fleet of its own:
// docs/setup.md's snippets start a nats-server from deploy/nats-server.conf
// (on a free loopback port in place of 127.0.0.1:4222, its store in the
// page's directory) and the fleet, then the page's snippets run, in order,
// each with bash in the state (exported variables, working directory,
// umask) the one before left. A failing snippet fails its subtest, named
// page:line, with its output; a skipped one is reported skipped with its
// reason. Processes a page leaves in the background are killed at its end.
func TestSnippets(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a fleet per page")
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	setup, err := snippets(root, setupPage)
	if err != nil {
		t.Fatal(err)
	}
	for _, page := range pages(t, root) {
		sn, err := snippets(root, page)
		if err != nil {
			t.Fatal(err)
		}
		if len(sn) == 0 {
			continue
		}
		if why, ok := notYetRun[page]; ok {
			for i := range sn {
				if sn[i].skip == "" {
					sn[i].skip = "not yet run: " + why
				}
			}
		}
		t.Run(filepath.Base(page), func(t *testing.T) {
			t.Parallel()
			all := sn
			if page != setupPage {
				// the setup page's own subtest reports its skipped snippets
				all = nil
				for _, s := range setup {
					if s.skip == "" {
						all = append(all, s)
					}
				}
				all = append(all, sn...)
			}
			runPage(t, root, all)
		})
	}
}

// freeAddr returns a loopback address with a port free a moment ago, for
// the page's nats-server to listen on.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// runPage runs the snippets in order, the server of their own on a free
// port in place of 127.0.0.1:4222.
func runPage(t *testing.T, root string, sn []snippet) {
	addr := freeAddr(t)
	work := t.TempDir()
	for _, d := range []string{"deploy", "examples"} {
		if err := os.Symlink(filepath.Join(root, d), filepath.Join(work, d)); err != nil {
			t.Fatal(err)
		}
	}
	home := t.TempDir()
	state := filepath.Join(t.TempDir(), "state.sh")
	env := []string{
		"PATH=" + bin + string(os.PathListSeparator) + os.Getenv("PATH"),
		"HOME=" + home,
		"XDG_CONFIG_HOME=" + filepath.Join(home, ".config"),
		"USER=ann",
		"TMPDIR=" + t.TempDir(),
		"GOCACHE=" + goEnv(t, "GOCACHE"),
	}
	init := "cd " + shellQuote(work) + "\n"
	if err := os.WriteFile(state, []byte(init), 0o600); err != nil {
		t.Fatal(err)
	}
	var groups []int
	t.Cleanup(func() {
		for _, pgid := range groups {
			syscall.Kill(-pgid, syscall.SIGTERM)
		}
		for _, pgid := range groups {
			waitGone(pgid)
		}
	})
	failed := false
	for _, s := range sn {
		t.Run(fmt.Sprintf("%s:%d", filepath.Base(s.page), s.line), func(t *testing.T) {
			if s.skip != "" {
				t.Skipf("%s: %s", s.name(), s.skip)
			}
			if failed {
				t.Skipf("%s: an earlier snippet of the page failed", s.name())
			}
			out, pgid, err := runSnippet(t, s, addr, state, env)
			groups = append(groups, pgid)
			if err != nil {
				failed = true
				t.Fatalf("%s: %v\n--- snippet\n%s--- output\n%s", s.name(), err, s.text, out)
			}
			if testing.Verbose() {
				t.Logf("%s: output\n%s", s.name(), out)
			}
		})
	}
}

// waitGone waits (a bounded while) for the processes of group pgid to end,
// killing them if they have not.
func waitGone(pgid int) {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if err := syscall.Kill(-pgid, 0); errors.Is(err, syscall.ESRCH) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	syscall.Kill(-pgid, syscall.SIGKILL)
}

// rewrite makes a snippet run here: the server's address in place of
// 127.0.0.1:4222, and the commands built once in place of go run.
func rewrite(text, addr string) string {
	r := strings.NewReplacer(
		"127.0.0.1:4222", addr,
		"go run ./cmd/coordinator", "coordinator",
		"go run ./cmd/toolworker", "toolworker",
	)
	return r.Replace(text)
}

// runSnippet runs one snippet with bash in its own process group, in the
// state the previous snippet left, and saves the state it leaves.
func runSnippet(t *testing.T, s snippet, addr, state string, env []string) (string, int, error) {
	script := "set -a\n. " + shellQuote(state) + "\nset +a\n" +
		"trap '{ export -p; echo cd \"$(printf %q \"$PWD\")\"; echo umask \"$(umask)\"; } > " + shellQuote(state) + ".next' EXIT\n" +
		"set -euo pipefail\n" + rewrite(s.text, addr)
	ctx, cancel := context.WithTimeout(t.Context(), snippetTimeout)
	defer cancel()
	outFile := filepath.Join(t.TempDir(), "out")
	out, err := os.Create(outFile)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	// the output is a file, not a pipe: Wait returns when bash does, with
	// background processes still running
	cmd.WaitDelay = time.Second
	err = cmd.Run()
	pgid := 0
	if cmd.Process != nil {
		pgid = cmd.Process.Pid
	}
	b, _ := os.ReadFile(outFile)
	if err == nil {
		if rerr := os.Rename(state+".next", state); rerr != nil {
			err = rerr
		}
	}
	if ctx.Err() != nil {
		err = fmt.Errorf("still running after %v: %w", snippetTimeout, err)
	}
	return string(b), pgid, err
}

func goEnv(t *testing.T, name string) string {
	t.Helper()
	out, err := exec.Command("go", "env", name).Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
