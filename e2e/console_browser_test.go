package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestConsoleInABrowser drives the web console in headless Chromium
// against real processes on a server started from deploy/nats-server.conf:
// a serving coordinator (the demo model), a toolworker and "coordinator
// console --nats-url". The operator logs in; a run the client submits
// asks for the calculator's approval, which appears on the operator's
// approvals page without a reload, and on the fleet page; the operator
// approves it (the viewer, logged in, has the request appear on its
// approvals page without a reload too, sees the fleet, the runs and the
// run's page, and its approval is refused on the page); the run's page,
// open in another tab since before the approval, the operator's and the
// viewer's, shows the call starting on the worker (its running segment
// labelled with the worker), finishing and the answer, live. The operator pauses and
// resumes a tool and reads its history. The client, logged in, has the
// list of runs refused, reads its own run, and a run not its own is not
// found; a prompt written as markup is shown as text and runs nothing.
// A cross-site POST and a request without a session are refused.
// No page throws or breaks its Content-Security-Policy.
//
// With CONSOLE_SCREENSHOTS=1 it writes a screenshot of each page into
// docs/console/ (docs/console.md shows them).
func TestConsoleInABrowser(t *testing.T) {
	t.Parallel()
	chromium := findChromium(t)
	srv := startApprovalServer(t)
	url := srv.ClientURL()
	serve := startProcEnv(t, "serve", approvalEnv(t, url, "coordinator"), bins.coordinator, "serve", "--name", "c1")
	worker := startProcEnv(t, "worker", approvalEnv(t, url, "worker"), bins.toolworker, "--builtin", "calculator,echo")
	console := startProcEnv(t, "console", []string{"NATS_URL=" + url}, bins.coordinator, "console", "--addr", "127.0.0.1:0")
	serve.waitLog(30*time.Second, `"serving runs"`)
	worker.waitLog(30*time.Second, `"worker started"`)
	console.waitLog(30*time.Second, `"serving the HTTP API"`)
	base := "http://" + console.logLines(func(m map[string]any) bool { return m["message"] == "serving the HTTP API" })[0]["addr"].(string)

	b := startBrowser(t, chromium)
	operator := b.user("operator")
	operator.login(base + "/approvals")
	operator.do("the approvals page streams", chromedp.WaitVisible(chromedp.CSS(`#approvals-live.on`)))
	marker := `window.consoleNotReloaded = true`
	operator.do("marking the page", chromedp.Evaluate[chromedp.Void](marker))

	// the viewer, in an account of its own, watches the approvals too
	viewer := b.user("viewer")
	viewer.login(base + "/approvals")
	viewer.do("the viewer's approvals page streams", chromedp.WaitVisible(chromedp.CSS(`#approvals-live.on`)),
		chromedp.Evaluate[chromedp.Void](marker))

	run := submitAsClient(t, base, `{"prompt": "What is 6 * 7?", "require_approval": ["calculator"]}`)
	card := fmt.Sprintf(`article.approval[data-run=%q]`, run)
	operator.do("the approval appears", chromedp.WaitVisible(chromedp.CSS(card)))
	if !operator.notReloaded() {
		t.Fatal("the approvals page was reloaded to show the request")
	}
	viewer.do("the approval appears to the viewer", chromedp.WaitVisible(chromedp.CSS(card)))
	if !viewer.notReloaded() {
		t.Fatal("the viewer's approvals page was reloaded to show the request")
	}
	operator.screenshot("approvals")

	// the run's page, open before the approval, follows the run live
	runTab := operator.tab()
	runTab.do("the fleet with the pending approval", chromedp.Navigate(base+"/"),
		chromedp.WaitVisible(chromedp.CSS(`#fleet-tools tr[data-tool="calculator"]`)),
		chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`#fleet-approvals a[href="/runs/%s"]`, run))))
	runTab.screenshot("fleet")
	runTab.do("the run's page", chromedp.Navigate(base+"/runs/"+run),
		chromedp.WaitVisible(chromedp.CSS(`#events li[data-kind="approval_requested"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#timeline-svg g.call.is-open`)),
		chromedp.Evaluate[chromedp.Void](marker))
	runTab.screenshot("run-waiting")

	// the viewer may not approve: the page shows the server's refusal,
	// and the request stays pending (a refusal ends the session's requests
	// in flight, so the viewer's run page opens after it, and sees the
	// call's start live)
	viewer.do("the viewer approving", chromedp.Click(chromedp.CSS(card+` button.approve`)), chromedp.WaitVisible(chromedp.CSS(`#error`)))
	if got := viewer.text(`#error`); !strings.Contains(got, "Refused") || !strings.Contains(got, "403") {
		t.Fatalf("the viewer's approval says %q, want the refusal", got)
	}
	// the viewer sees the fleet (the catalog's tools, no worker: its
	// account asks none), the runs and the run's page, open before the
	// approval
	viewerRun := viewer.tab()
	viewerRun.do("the viewer's fleet", chromedp.Navigate(base+"/"),
		chromedp.WaitVisible(chromedp.CSS(`#fleet-tools tr[data-tool="calculator"]`)),
		chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`#fleet-approvals a[href="/runs/%s"]`, run))))
	viewerRun.do("the viewer's runs", chromedp.Navigate(base+"/runs"), chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`#runs tr[data-run=%q]`, run))))
	viewerRun.do("the viewer's run page", chromedp.Navigate(base+"/runs/"+run),
		chromedp.WaitVisible(chromedp.CSS(`#events li[data-kind="approval_requested"]`)),
		chromedp.Evaluate[chromedp.Void](marker))
	operator.do("the request still pending after the viewer", chromedp.WaitVisible(chromedp.CSS(card)))

	operator.do("approving", chromedp.SendKeys(chromedp.CSS(card+` input.reason`), "checked the expression"),
		chromedp.Click(chromedp.CSS(card+` button.approve`)),
		chromedp.WaitNotPresent(chromedp.CSS(card)),
		chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`#decisions tr[data-run=%q]`, run))))
	if got := operator.text(fmt.Sprintf(`#decisions tr[data-run=%q]`, run)); !strings.Contains(got, "approved") ||
		!strings.Contains(got, "operator") || !strings.Contains(got, "checked the expression") {
		t.Fatalf("the audit's row: %q, want approved by operator with the reason", got)
	}
	operator.screenshot("approvals-decided")

	runTab.do("the run finishes on the page", chromedp.WaitVisible(chromedp.CSS(`#events li[data-kind="finished"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#timeline-svg g.call.is-done[data-outcome="ok"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#calls tbody tr[data-call] .badge.ok`)),
		chromedp.WaitVisible(chromedp.CSS(`#transcript li.msg.tool`)))
	if !runTab.notReloaded() {
		t.Fatal("the run's page was reloaded to show the run finishing")
	}
	if got := runTab.text(`#run-answer`); !strings.Contains(got, "42") {
		t.Fatalf("the answer on the run's page: %q", got)
	}
	workerName, _ := worker.logLines(func(m map[string]any) bool { return m["message"] == "worker started" })[0]["worker"].(string)
	// the call's start on its worker, heard live (call_started), drew its
	// running segment labelled with the worker's name
	startLabel := fmt.Sprintf(`#timeline-svg g.call.is-done text.seg-label[data-worker=%q]`, workerName)
	runTab.do("the call's start on its worker", chromedp.WaitVisible(chromedp.CSS(startLabel)),
		chromedp.WaitVisible(chromedp.CSS(`#events li[data-kind="call_started"]`)))
	if got := runTab.text(`#calls tbody`); !strings.Contains(got, "calculator") || workerName == "" || !strings.Contains(got, workerName) {
		t.Fatalf("the calls on the run's page: %q, want the calculator's call and its worker", got)
	}
	if got := runTab.text(`#transcript`); !strings.Contains(got, "What is 6 * 7?") {
		t.Fatalf("the transcript: %q", got)
	}
	runTab.screenshot("run")
	viewerRun.do("the run finishes on the viewer's page", chromedp.WaitVisible(chromedp.CSS(`#events li[data-kind="finished"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#timeline-svg g.call.is-done[data-outcome="ok"]`)),
		chromedp.WaitVisible(chromedp.CSS(startLabel)))
	if !viewerRun.notReloaded() {
		t.Fatal("the viewer's run page was reloaded to show the run finishing")
	}
	if got := viewerRun.text(`#run-answer`); !strings.Contains(got, "42") {
		t.Fatalf("the answer on the viewer's run page: %q", got)
	}

	operator.do("the runs", chromedp.Navigate(base+"/runs"), chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`#runs tr[data-run=%q]`, run))))
	operator.do("the runs filtered", chromedp.SetValue(chromedp.CSS(`#filter-state`), "running"),
		chromedp.Click(chromedp.CSS(`#runs-filter button`)),
		chromedp.WaitNotPresent(chromedp.CSS(fmt.Sprintf(`#runs tr[data-run=%q]`, run))),
		chromedp.SetValue(chromedp.CSS(`#filter-state`), "finished"),
		chromedp.Click(chromedp.CSS(`#runs-filter button`)),
		chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`#runs tr[data-run=%q]`, run))))
	operator.screenshot("runs")
	operator.do("the fleet", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS(`#fleet-tools tr[data-tool="calculator"]`)))
	if got := operator.text(`#fleet-tools tr[data-tool="calculator"]`); !strings.Contains(got, workerName) || !strings.Contains(got, "open") {
		t.Fatalf("the fleet's calculator row: %q, want its worker and open", got)
	}

	row := `#tools tr[data-tool="echo"]`
	operator.do("pausing a tool", chromedp.Navigate(base+"/tools#echo"), chromedp.WaitVisible(chromedp.CSS(row)),
		chromedp.SendKeys(chromedp.CSS(row+` input.reason`), "maintenance"),
		chromedp.Click(chromedp.CSS(row+` button.pause`)),
		chromedp.WaitVisible(chromedp.CSS(row+` .badge.paused`)))
	operator.do("resuming it", chromedp.SendKeys(chromedp.CSS(row+` input.reason`), "done"),
		chromedp.Click(chromedp.CSS(row+` button.resume`)),
		chromedp.WaitNotPresent(chromedp.CSS(row+` .badge.paused`)),
		chromedp.WaitVisible(chromedp.CSS(`#history tbody tr:nth-child(2)`)))
	if got := operator.text(`#history`); !strings.Contains(got, "maintenance") || !strings.Contains(got, "operator") {
		t.Fatalf("the echo tool's history: %q, want the pause by operator", got)
	}
	operator.screenshot("tools")

	client := b.user("client")
	client.login(base + "/runs")
	client.do("the runs refused", chromedp.WaitVisible(chromedp.CSS(`#error`)))
	if got := client.text(`#error`); !strings.Contains(got, "Refused") || !strings.Contains(got, "403") {
		t.Fatalf("the client's runs page says %q, want the refusal", got)
	}
	client.screenshot("runs-client")
	client.do("its own run", chromedp.Navigate(base+"/runs/"+run), chromedp.WaitVisible(chromedp.CSS(`#calls tbody tr[data-call]`)))
	if got := client.text(`#run-answer`); !strings.Contains(got, "42") {
		t.Fatalf("the client's own run: %q", got)
	}
	// text from outside is shown as text: a prompt that would run script
	// if inserted as HTML runs none
	hostile := `<img src=x onerror="window.pwned=1"><script>window.pwned=1</script>`
	evil := submitAsClient(t, base, fmt.Sprintf(`{"prompt": %q}`, hostile))
	client.do("a run with hostile text", chromedp.Navigate(base+"/runs/"+evil),
		chromedp.WaitVisible(chromedp.CSS(`#events li[data-kind="finished"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#transcript li.msg.user`)))
	if got := client.text(`#transcript li.msg.user`); !strings.Contains(got, hostile) {
		t.Fatalf("the hostile prompt reads %q, want it as text", got)
	}
	if pwned, err := chromedp.Run(client.ctx, chromedp.Evaluate[bool](`window.pwned !== undefined || document.querySelector("#transcript img, #transcript script") !== null`)); err != nil || pwned {
		t.Fatalf("the hostile prompt became markup or ran (%v)", err)
	}
	client.do("a run not its own", chromedp.Navigate(base+"/runs/notitsown"), chromedp.WaitVisible(chromedp.CSS(`#error`)))
	if got := client.text(`#error`); !strings.Contains(got, "404") {
		t.Fatalf("a run not the client's: %q, want not found", got)
	}
	client.do("the tools refused", chromedp.Navigate(base+"/tools"), chromedp.WaitVisible(chromedp.CSS(`#error`)))
	if got := client.text(`#error`); !strings.Contains(got, "Refused") || !strings.Contains(got, "forbidden") {
		t.Fatalf("the client's tools page says %q, want the refusal", got)
	}

	refusedRequests(t, base)
	b.check()
}

// refusedRequests: a cross-site POST with the operator's session cookie
// and CSRF token, and a POST without a session, are refused, and the tool
// they would pause is not paused.
func refusedRequests(t *testing.T, base string) {
	t.Helper()
	do := func(req *http.Request) (int, string) {
		t.Helper()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(data)
	}
	login, _ := http.NewRequestWithContext(t.Context(), "POST", base+"/v1/session",
		strings.NewReader(fmt.Sprintf(`{"user": "operator", "password": %q}`, approvalPasswords["operator"])))
	resp, err := http.DefaultClient.Do(login)
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		CSRF string `json:"csrf_token"`
	}
	json.NewDecoder(resp.Body).Decode(&info)
	resp.Body.Close()
	cookies := resp.Cookies()
	if resp.StatusCode != http.StatusCreated || len(cookies) == 0 || info.CSRF == "" {
		t.Fatalf("login: %d", resp.StatusCode)
	}
	pause := func(headers map[string]string, withCookie bool) (int, string) {
		req, _ := http.NewRequestWithContext(t.Context(), "POST", base+"/v1/tools/calculator/pause", strings.NewReader(`{"reason": "forged"}`))
		req.Header.Set("Content-Type", "application/json")
		for k, v := range headers {
			req.Header.Set(k, v)
		}
		if withCookie {
			for _, c := range cookies {
				req.AddCookie(c)
			}
		}
		return do(req)
	}
	if st, body := pause(map[string]string{"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site", "X-CSRF-Token": info.CSRF}, true); st != http.StatusForbidden || !strings.Contains(body, `"cross_site"`) {
		t.Fatalf("a cross-site POST: %d %s, want 403 cross_site", st, body)
	}
	if st, body := pause(nil, false); st != http.StatusUnauthorized || !strings.Contains(body, `"unauthenticated"`) {
		t.Fatalf("a POST without a session: %d %s, want 401", st, body)
	}
	req, _ := http.NewRequestWithContext(t.Context(), "GET", base+"/v1/tools", nil)
	for _, c := range cookies {
		req.AddCookie(c)
	}
	if st, body := do(req); st != http.StatusOK || strings.Contains(body, `"paused": true`) {
		t.Fatalf("the tools after the refused requests: %d %s, want none paused", st, body)
	}
}

// submitAsClient submits a run as the client with Basic authentication
// and returns its id.
func submitAsClient(t *testing.T, base, body string) string {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), "POST", base+"/v1/runs", strings.NewReader(body))
	req.SetBasicAuth("client", approvalPasswords["client"])
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var sub struct {
		RunID string `json:"run_id"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&sub); err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("submit: %d %v", resp.StatusCode, err)
	}
	return sub.RunID
}

// findChromium returns the path of Chromium, or skips the test saying why.
func findChromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("chromium is not installed: the console's browser test needs it (test.sh installs Debian's package as root with apt)")
	return ""
}

// browserWait bounds each step of the browser test.
const browserWait = 60 * time.Second

// browser is one headless Chromium; each user gets a browser context of
// its own (its own cookies) in it.
type browser struct {
	t        *testing.T
	ctx      context.Context
	mu       sync.Mutex
	problems []string
}

func startBrowser(t *testing.T, path string) *browser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox,
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 960))
	alloc, cancel := chromedp.NewExecAllocator(t.Context(), opts...)
	t.Cleanup(cancel)
	ctx, cancelCtx := chromedp.NewContext(alloc)
	t.Cleanup(cancelCtx)
	// the first run starts the browser, which lives as long as its
	// context: this one, not one with a deadline
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	return &browser{t: t, ctx: ctx}
}

// check fails the test if a page threw or broke its policy.
func (b *browser) check() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, p := range b.problems {
		b.t.Errorf("in the browser: %s", p)
	}
}

// tab is one tab of one user's browser context.
type tab struct {
	b    *browser
	user string
	ctx  context.Context
}

// user returns a first tab in a new browser context for user.
func (b *browser) user(user string) *tab {
	ctx, cancel := chromedp.NewContext(b.ctx, chromedp.WithNewBrowserContext())
	b.t.Cleanup(cancel)
	return b.watch(&tab{b: b, user: user, ctx: ctx})
}

// tab opens another tab of the same user (the same cookies).
func (tb *tab) tab() *tab {
	ctx, cancel := chromedp.NewContext(tb.ctx)
	tb.b.t.Cleanup(cancel)
	return tb.b.watch(&tab{b: tb.b, user: tb.user, ctx: ctx})
}

// watch records the tab's uncaught exceptions and policy violations.
func (b *browser) watch(tb *tab) *tab {
	if err := chromedp.Do(tb.ctx); err != nil { // opens the tab, for as long as its context
		b.t.Fatalf("opening a tab: %v", err)
	}
	go func() {
		for m, err := range chromedp.Console(tb.ctx) {
			if err != nil {
				return
			}
			if m.IsException() || strings.Contains(m.Text, "Content Security Policy") {
				b.mu.Lock()
				b.problems = append(b.problems, tb.user+": "+m.String())
				b.mu.Unlock()
			}
		}
	}()
	return tb
}

// do runs steps, each waiting under the deadline browserWait.
func (tb *tab) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	tb.b.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, browserWait)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		// what the page shows, read at once: no element is waited for
		look, stop := context.WithTimeout(tb.ctx, 5*time.Second)
		defer stop()
		loc, _ := chromedp.Run(look, chromedp.Location())
		page, _ := chromedp.Run(look, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
		tb.b.t.Fatalf("%s (%s at %s): %v\nthe page reads:\n%s", what, tb.user, loc, err, page)
	}
}

// text is the text of the first element sel matches.
func (tb *tab) text(sel string) string {
	tb.b.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, browserWait)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.TextContent(chromedp.CSS(sel)))
	if err != nil {
		tb.b.t.Fatalf("the text of %s: %v", sel, err)
	}
	return s
}

// notReloaded says whether the marker set on the page is still there.
func (tb *tab) notReloaded() bool {
	tb.b.t.Helper()
	ok, err := chromedp.Run(tb.ctx, chromedp.Evaluate[bool](`window.consoleNotReloaded === true`))
	if err != nil {
		tb.b.t.Fatal(err)
	}
	return ok
}

// login goes to page, is sent to the login page, logs in as the tab's
// user and lands on page.
func (tb *tab) login(page string) {
	tb.b.t.Helper()
	tb.do("the login page", chromedp.Navigate(page), chromedp.WaitVisible(chromedp.CSS(`#login-user`)))
	tb.screenshot("login")
	tb.do("logging in", chromedp.SendKeys(chromedp.CSS(`#login-user`), tb.user),
		chromedp.SendKeys(chromedp.CSS(`#login-password`), approvalPasswords[tb.user]),
		chromedp.Click(chromedp.CSS(`#login-submit`)),
		chromedp.WaitVisible(chromedp.CSS(`#user`)))
	loc, err := chromedp.Run(tb.ctx, chromedp.Location())
	if err != nil || loc != page {
		tb.b.t.Fatalf("after the login: at %s (%v), want %s", loc, err, page)
	}
	if got := tb.text(`#user`); got != tb.user {
		tb.b.t.Fatalf("logged in as %q, want %q", got, tb.user)
	}
}

// screenshot writes the tab's page to docs/console/<name>.png when
// CONSOLE_SCREENSHOTS=1.
func (tb *tab) screenshot(name string) {
	tb.b.t.Helper()
	if os.Getenv("CONSOLE_SCREENSHOTS") != "1" {
		return
	}
	ctx, cancel := context.WithTimeout(tb.ctx, browserWait)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		tb.b.t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join("..", "docs", "console", name+".png"), png, 0o644); err != nil {
		tb.b.t.Fatal(err)
	}
}
