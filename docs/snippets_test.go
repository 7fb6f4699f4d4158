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
	"io"
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
	return parseSnippets(page, f)
}

// parseSnippets returns the shell snippets of the markdown page read from r.
func parseSnippets(page string, r io.Reader) ([]snippet, error) {
	var (
		out    []snippet
		cur    *snippet
		indent string
		skip   string
		body   strings.Builder
		n      int
	)
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
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

func TestMain(m *testing.M) {
	flag.Parse()
	if !testing.Short() {
		natscli.Prepare()
	}
	os.Exit(m.Run())
}

// buildCommands builds what the snippets run into a directory for PATH:
// coordinator, toolworker and nats-server, and the nats CLI beside them.
func buildCommands(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, args := range [][]string{
		{"build", "-o", dir, "../cmd/coordinator", "../cmd/toolworker"},
		{"build", "-o", filepath.Join(dir, "nats-server"), "github.com/nats-io/nats-server/v2"},
	} {
		if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	if err := os.Symlink(natscli.Path(t), filepath.Join(dir, "nats")); err != nil {
		t.Fatal(err)
	}
	return dir
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
	bin := buildCommands(t)
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
			runPage(t, root, bin, all)
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
func runPage(t *testing.T, root, bin string, sn []snippet) {
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

// TestParseSnippets: sh and bash blocks are snippets, with their page's
// line; other blocks are not; a skip comment right before a fence (blank
// lines aside) marks that snippet only; an indented fence's indentation is
// taken off its lines; an unclosed block is an error.
func TestParseSnippets(t *testing.T) {
	page := "intro\n" + // 1
		"```sh\n" + // 2
		"echo one\n" + // 3
		"```\n" + // 4
		"<!-- snippet: skip (needs Docker (v2)) -->\n" + // 5
		"\n" + // 6
		"```bash\n" + // 7
		"docker ps\n" + // 8
		"```\n" + // 9
		"<!-- snippet: skip (not this one) -->\n" + // 10
		"some text\n" + // 11
		"```json\n" + // 12
		"{}\n" + // 13
		"```\n" + // 14
		"1. step\n" + // 15
		"   ```sh\n" + // 16
		"   echo two \\\n" + // 17
		"     three\n" + // 18
		"   ```\n" // 19
	got, err := parseSnippets("p.md", strings.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	want := []snippet{
		{page: "p.md", line: 2, text: "echo one\n"},
		{page: "p.md", line: 7, text: "docker ps\n", skip: "needs Docker (v2)"},
		{page: "p.md", line: 16, text: "echo two \\\n  three\n"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d snippets %+v, want %+v", len(got), got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("snippet %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
	if _, err := parseSnippets("p.md", strings.NewReader("```sh\necho\n")); err == nil {
		t.Error("an unclosed snippet parsed without an error")
	}
}

// FuzzParseSnippets: any page parses without panicking, and every snippet
// it finds starts on a line of the page that opens a shell block.
func FuzzParseSnippets(f *testing.F) {
	f.Add("```sh\necho\n```\n")
	f.Add("<!-- snippet: skip (x) -->\n  ```bash\n  a\n  ```\n")
	f.Add("```sh\n")
	f.Fuzz(func(t *testing.T, page string) {
		got, err := parseSnippets("p.md", strings.NewReader(page))
		if err != nil {
			return
		}
		lines := strings.Split(page, "\n")
		for _, s := range got {
			if s.line < 1 || s.line > len(lines) || !fenceRE.MatchString(strings.TrimSuffix(lines[s.line-1], "\r")) {
				t.Fatalf("snippet at line %d, which opens no shell block, in %q", s.line, page)
			}
		}
	})
}
