package mcptool_test

import (
	"context"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/internal/testsync"
	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/mcptool"
	"github.com/toolfleet/toolfleet/pkg/mcptool/mcptooltest"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

var serverBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "mcptool-test-")
	if err != nil {
		panic(err)
	}
	serverBin, err = mcptooltest.Build(dir)
	if err != nil {
		os.RemoveAll(dir)
		panic(err)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

const canary = "CANARY-7d1f0a9e-secret"

// start runs the test server over stdio and returns it with a harness of
// its tools.
func start(t *testing.T, mode string, edit func(*mcptool.ServerConfig)) (*mcptool.Server, *harness.Harness) {
	t.Helper()
	cfg := mcptooltest.StdioConfig(serverBin, "t", mode, "SECRET_CANARY="+canary)
	cfg.CancelGrace = 300 * time.Millisecond
	if edit != nil {
		edit(&cfg)
	}
	s, err := mcptool.Start(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	h, err := harness.New(harness.Config{}, s.Tools()...)
	if err != nil {
		t.Fatal(err)
	}
	return s, h
}

func call(h *harness.Harness, tool protocol.ToolName, args string, timeout time.Duration) harness.Result {
	return h.Execute(context.Background(), harness.Call{Tool: tool, Arguments: []byte(args), Deadline: time.Now().Add(timeout)})
}

func want(t *testing.T, r harness.Result, outcome protocol.Outcome, errType string) {
	t.Helper()
	if r.Outcome != outcome || r.ErrorType != errType {
		t.Fatalf("got outcome %s error type %q (output %.200q), want %s %q", r.Outcome, r.ErrorType, r.Output, outcome, errType)
	}
}

func TestListsToolsWithAnnotationsAndPrefix(t *testing.T) {
	_, h := start(t, "1", nil)
	specs := map[protocol.ToolName]protocol.ToolSpec{}
	for _, s := range h.Specs() {
		specs[s.Name] = s
	}
	for _, n := range []protocol.ToolName{"t_echo", "t_add", "t_fail", "t_image", "t_hang", "t_crash", "t_big"} {
		if _, ok := specs[n]; !ok {
			t.Fatalf("catalog lacks %s: %v", n, specs)
		}
	}
	// An MCP server's annotations never lower the caution (issue 24, M4):
	// "echo" says readOnlyHint, "add" idempotentHint and destructiveHint
	// false; both stay non-idempotent and approval-gated, as "hang" without
	// annotations is. Only the manifest lowers a gate.
	for name, w := range map[protocol.ToolName][2]bool{
		"t_echo": {false, true}, // readOnlyHint: ignored
		"t_add":  {false, true}, // idempotentHint, destructiveHint false: ignored
		"t_hang": {false, true}, // no annotations: fail safe
	} {
		if s := specs[name]; s.Idempotent != w[0] || s.RequiresApproval != w[1] {
			t.Errorf("%s: idempotent %v requires_approval %v, want %v %v", name, s.Idempotent, s.RequiresApproval, w[0], w[1])
		}
	}
	if !strings.Contains(string(specs["t_echo"].Parameters), `"text"`) {
		t.Errorf("t_echo parameters are not the inputSchema: %s", specs["t_echo"].Parameters)
	}
}

func TestManifestOverridesAnnotations(t *testing.T) {
	yes, no := true, false
	_, h := start(t, "1", func(c *mcptool.ServerConfig) {
		p := "x-"
		c.Prefix = &p
		c.RequiresApproval = &no
		c.Tools = map[string]mcptool.ToolOverride{"echo": {Idempotent: &no, RequiresApproval: &yes, Timeout: 3 * time.Second}}
	})
	for _, s := range h.Specs() {
		switch s.Name {
		case "x-echo":
			if s.Idempotent || !s.RequiresApproval || s.TimeoutMS != 3000 {
				t.Errorf("x-echo: %+v", s)
			}
		case "x-hang":
			if s.RequiresApproval {
				t.Errorf("x-hang: the server-wide requires_approval false was ignored")
			}
		}
	}
}

func TestCalls(t *testing.T) {
	_, h := start(t, "1", nil)
	r := call(h, "t_echo", `{"text":"hello"}`, 10*time.Second)
	want(t, r, protocol.OutcomeOK, "")
	if r.Output != "hello" {
		t.Errorf("echo: %q", r.Output)
	}
	r = call(h, "t_add", `{"a":2,"b":3}`, 10*time.Second)
	want(t, r, protocol.OutcomeOK, "")
	if r.Output != `{"sum":5}` {
		t.Errorf("structured output: %q", r.Output)
	}
	want(t, call(h, "t_wrong_output", `{}`, 10*time.Second), protocol.OutcomeFailed, "mcptool.OutputSchemaError")
	r = call(h, "t_fail", `{}`, 10*time.Second)
	want(t, r, protocol.OutcomeFailed, "mcptool.ToolError")
	if strings.Contains(r.Output, "secret-detail") {
		t.Errorf("the tool's error message reached the output: %q", r.Output)
	}
	r = call(h, "t_image", `{}`, 10*time.Second)
	want(t, r, protocol.OutcomeOK, "")
	if r.Output != "a picture:\n[image: image/png, 2048 bytes]" {
		t.Errorf("image: %q", r.Output)
	}
	// The schema is the inputSchema: the harness refuses before the call.
	want(t, call(h, "t_add", `{"a":"two","b":3}`, 10*time.Second), protocol.OutcomeInvalidArguments, "")
}

func TestSecretsInTheServersEnvironmentAreRedacted(t *testing.T) {
	_, h := start(t, "1", nil)
	r := call(h, "t_env", `{"name":"SECRET_CANARY"}`, 10*time.Second)
	want(t, r, protocol.OutcomeOK, "")
	if strings.Contains(r.Output, canary) || r.Output != "SECRET_CANARY="+mcptool.Redacted {
		t.Fatalf("canary not redacted: %q", r.Output)
	}
}

func TestSchemaThatDoesNotCompileRefusesTheStart(t *testing.T) {
	cfg := mcptooltest.StdioConfig(serverBin, "bad", "badschema")
	_, err := mcptool.Start(context.Background(), cfg)
	if err == nil {
		t.Fatal("Start accepted a tool whose schema does not compile")
	}
	for _, w := range []string{`mcp server "bad"`, `tool "broken"`, "inputSchema does not compile"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not say %q", err, w)
		}
	}
}

// pid calls the pid tool, which the server answers with its process id.
func pid(t *testing.T, h *harness.Harness) string {
	t.Helper()
	r := call(h, "t_pid", `{}`, 20*time.Second)
	want(t, r, protocol.OutcomeOK, "")
	return r.Output
}

func TestToolIgnoringCancellationIsKilledAndRestarted(t *testing.T) {
	s, h := start(t, "1", nil)
	before := pid(t, h)
	want(t, call(h, "t_hang", `{}`, 500*time.Millisecond), protocol.OutcomeTimeout, "")
	testsync.WaitUntil(t, 30*time.Second, "the restart", func() bool { return s.Restarts() == 1 })
	if after := pid(t, h); after == before {
		t.Fatalf("same server process %s after the kill", after)
	}
}

func TestServerCrashingMidCallIsAnsweredAndRestarted(t *testing.T) {
	s, h := start(t, "1", nil)
	want(t, call(h, "t_crash", `{}`, 20*time.Second), protocol.OutcomeFailed, "mcptool.ConnectionLost")
	testsync.WaitUntil(t, 30*time.Second, "the restart", func() bool { return s.Restarts() == 1 })
	want(t, call(h, "t_echo", `{"text":"back"}`, 20*time.Second), protocol.OutcomeOK, "")
}

func TestGarbageOnStdoutRestartsTheServer(t *testing.T) {
	s, h := start(t, "1", nil)
	want(t, call(h, "t_garbage", `{}`, 20*time.Second), protocol.OutcomeFailed, "mcptool.ConnectionLost")
	testsync.WaitUntil(t, 30*time.Second, "the restart", func() bool { return s.Restarts() == 1 })
	want(t, call(h, "t_echo", `{"text":"back"}`, 20*time.Second), protocol.OutcomeOK, "")
}

func TestHundredMegabyteResponseIsBounded(t *testing.T) {
	s, h := start(t, "1", nil)
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	r := call(h, "t_big", `{"mb":100}`, 60*time.Second)
	runtime.ReadMemStats(&m1)
	want(t, r, protocol.OutcomeFailed, "mcptool.MessageTooLarge")
	if alloc := m1.TotalAlloc - m0.TotalAlloc; alloc > 80<<20 {
		t.Errorf("allocated %d MiB for a 100 MiB response: not bounded", alloc>>20)
	}
	testsync.WaitUntil(t, 30*time.Second, "the restart", func() bool { return s.Restarts() == 1 })
	// Below the bound, a big text is truncated like any output.
	r = call(h, "t_big", `{"mb":1}`, 60*time.Second)
	want(t, r, protocol.OutcomeOK, "")
	if !r.Truncated || len(r.Output) > harness.DefaultMaxOutputChars {
		t.Errorf("1 MiB output: truncated %v, %d bytes", r.Truncated, len(r.Output))
	}
}

func TestToolListChangedUpdatesTheTools(t *testing.T) {
	s, h := start(t, "1", nil)
	changed := make(chan struct{}, 1)
	s.OnChange(func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	})
	want(t, call(h, "t_add_tool", `{"name":"fresh"}`, 20*time.Second), protocol.OutcomeOK, "")
	select {
	case <-changed:
	case <-time.After(30 * time.Second):
		t.Fatal("no change reported after tools/list_changed")
	}
	h2, err := harness.New(harness.Config{}, s.Tools()...)
	if err != nil {
		t.Fatal(err)
	}
	r := call(h2, "t_fresh", `{}`, 20*time.Second)
	want(t, r, protocol.OutcomeOK, "")
	if r.Output != "new tool fresh" {
		t.Errorf("new tool: %q", r.Output)
	}
}

func TestStreamableHTTPServerWithHeaderFromTheEnvironment(t *testing.T) {
	srv := httptest.NewServer(mcptooltest.Handler(canary))
	defer srv.Close()
	manifest := `{"mcp_servers":[{"name":"web","url":"` + srv.URL + `","headers_from_env":{"Authorization":"WEB_AUTH"}}]}`
	getenv := func(k string) string {
		if k == "WEB_AUTH" {
			return "Bearer " + canary
		}
		return ""
	}
	cfgs, err := mcptool.ParseManifest([]byte(manifest), "", getenv)
	if err != nil {
		t.Fatal(err)
	}
	s, err := mcptool.Start(context.Background(), cfgs[0])
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	defer s.Close()
	h, err := harness.New(harness.Config{}, s.Tools()...)
	if err != nil {
		t.Fatal(err)
	}
	r := call(h, "web_echo", `{"text":"over http `+canary+`"}`, 20*time.Second)
	want(t, r, protocol.OutcomeOK, "")
	if r.Output != "over http "+mcptool.Redacted {
		t.Errorf("echo over HTTP: %q", r.Output)
	}
	want(t, call(h, "web_fail", `{}`, 20*time.Second), protocol.OutcomeFailed, "mcptool.ToolError")

	cfgs[0].Headers = map[string]string{"Authorization": "Bearer wrong"}
	if _, err := mcptool.Start(context.Background(), cfgs[0]); err == nil {
		t.Error("Start succeeded with a wrong token")
	} else if strings.Contains(err.Error(), "wrong") {
		t.Errorf("the error shows the header value: %v", err)
	}
}

func TestToolHonouringCancellationIsNotRestarted(t *testing.T) {
	// A long grace: the answer must come within it however loaded the
	// machine is; the test ends as soon as it comes.
	s, h := start(t, "1", func(c *mcptool.ServerConfig) { c.CancelGrace = 20 * time.Second })
	before := pid(t, h)
	want(t, call(h, "t_wait", `{}`, 300*time.Millisecond), protocol.OutcomeTimeout, "")
	// The Go SDK answers the cancelled request when the handler returns.
	testsync.WaitUntil(t, 30*time.Second, "the cancelled request's answer", func() bool { a, _ := s.CancelStats(); return a == 1 })
	if after := pid(t, h); after != before || s.Restarts() != 0 {
		t.Fatalf("a server that honoured the cancel was restarted (pid %s → %s, %d restarts)", before, after, s.Restarts())
	}
}

func TestTrustCancelKeepsAServerThatIgnoresIt(t *testing.T) {
	s, h := start(t, "1", func(c *mcptool.ServerConfig) { c.TrustCancel = true })
	before := pid(t, h)
	want(t, call(h, "t_hang", `{}`, 300*time.Millisecond), protocol.OutcomeTimeout, "")
	testsync.WaitUntil(t, 30*time.Second, "the grace to pass", func() bool { _, u := s.CancelStats(); return u == 1 })
	if after := pid(t, h); after != before || s.Restarts() != 0 {
		t.Fatalf("trust_cancel: the server was restarted (pid %s → %s)", before, after)
	}
}
