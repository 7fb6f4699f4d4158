package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/natscli"
	"github.com/toolfleet/toolfleet/internal/natstest"
	"github.com/toolfleet/toolfleet/internal/testsync"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// mcpCanary is the secret in the MCP server's environment: it must reach
// neither an MCP client, nor a log, nor NATS.
const mcpCanary = "MCP-CANARY-3b9e1c77-do-not-leak"

// TestMCPBothWays serves an MCP server's tools through the fleet (a
// toolworker supervising the go-sdk test server) and serves the fleet to MCP
// clients (coordinator mcp over stdio and HTTP, go-sdk clients), with an
// approval-gated tool approved with the nats CLI while the client waits.
func TestMCPBothWays(t *testing.T) {
	t.Parallel()
	natsBin := natscli.Path(t)
	srv := natstest.Start(t)
	url := srv.ClientURL()
	dir := t.TempDir()
	manifest := writeJSON(t, dir, "tools.json", map[string]any{"mcp_servers": []any{map[string]any{
		"name":              "t",
		"command":           []string{bins.mcpserver, "1"},
		"env_from":          map[string]string{"SECRET_CANARY": "E2E_MCP_SECRET"},
		"requires_approval": false,
		"tools": map[string]any{
			"pid":  map[string]any{"requires_approval": true},
			"hang": map[string]any{"timeout": "2s"},
			"add":  map[string]any{"idempotent": true},
		},
		"cancel_grace": "500ms",
	}}})
	worker := startProcEnv(t, "toolworker", []string{"NATS_URL=" + url, "E2E_MCP_SECRET=" + mcpCanary},
		bins.toolworker, "--tools", manifest, "--name", "w1", "--log-level", "debug")
	waitForCatalog(t, url, worker, "t_echo", "t_add", "t_env", "t_pid", "t_fail", "t_hang")

	coordEnv := []string{"NATS_URL=" + url}
	var logs []*testsync.Buffer

	t.Run("stdio", func(t *testing.T) {
		cmd := exec.Command(bins.coordinator, "mcp", "--workers", "0", "--log-level", "debug")
		cmd.Env = append([]string{"PATH=/usr/bin:/bin"}, coordEnv...)
		stderr := &testsync.Buffer{}
		logs = append(logs, stderr)
		cmd.Stderr = stderr
		cs := connect(t, &mcp.CommandTransport{Command: cmd}, nil)
		defer cs.Close()

		tools := listTools(t, cs)
		for _, n := range []string{"t_echo", "t_add", "t_pid"} {
			if tools[n] == nil {
				t.Fatalf("tools/list lacks %s: %v", n, keys(tools))
			}
		}
		if a := tools["t_add"].Annotations; a == nil || !a.IdempotentHint {
			t.Errorf("t_add: idempotent not announced: %+v", a)
		}
		r := callTool(t, cs, "t_add", `{"a":2,"b":40}`, nil)
		wantResult(t, r, "ok", `{"sum":42}`)
		r = callTool(t, cs, "t_env", `{"name":"SECRET_CANARY"}`, nil)
		wantResult(t, r, "ok", "SECRET_CANARY=[redacted]")
		r = callTool(t, cs, "t_fail", `{}`, nil)
		wantResult(t, r, "failed", "Tool 't_fail' failed: mcptool.ToolError")
		r = callTool(t, cs, "t_add", `{"a":"two","b":1}`, nil)
		wantResult(t, r, "invalid_arguments", "")
		// A tool that ignores cancellation: the deadline ends the call,
		// and the worker kills and restarts the MCP server.
		wantResult(t, callTool(t, cs, "t_hang", `{}`, nil), "timeout", "Tool 't_hang' timed out")
		worker.waitLog(60*time.Second, "mcp server did not stop a cancelled call within the grace: killing it", "mcp server restarted")
		wantResult(t, callTool(t, cs, "t_echo", `{"text":"after the restart"}`, nil), "ok", "after the restart")
	})

	t.Run("http with a bearer token and an approval", func(t *testing.T) {
		const token = "e2e-mcp-token-91f3"
		p := startProcEnv(t, "coordinator mcp http", append(coordEnv, "TOOLFLEET_MCP_TOKENS="+token), bins.coordinator,
			"mcp", "--workers", "0", "--transport", "http", "--http-addr", "127.0.0.1:0", "--log-level", "debug",
			"--approval-timeout", "60s")
		p.waitLog(60*time.Second, "serving MCP over streamable HTTP")
		var addr string
		for _, l := range p.logLines(func(m map[string]any) bool { return m["message"] == "serving MCP over streamable HTTP" }) {
			addr, _ = l["addr"].(string)
		}
		endpoint := "http://" + addr + "/mcp"

		if _, err := mcp.NewClient(&mcp.Implementation{Name: "e2e"}, nil).Connect(t.Context(),
			&mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: bearer("wrong")}, nil); err == nil {
			t.Error("connected with a wrong token")
		}

		var mu sync.Mutex
		var progress []string
		cs := connect(t, &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: bearer(token)},
			&mcp.ClientOptions{ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
				mu.Lock()
				progress = append(progress, req.Params.Message)
				mu.Unlock()
			}})
		defer cs.Close()
		wantResult(t, callTool(t, cs, "t_echo", `{"text":"over http"}`, nil), "ok", "over http")

		// The approval-gated call: the client waits while the operator
		// approves with the nats CLI.
		done := make(chan *mcp.CallToolResult, 1)
		go func() {
			done <- callTool(t, cs, "t_pid", `{}`, mcp.Meta{"progressToken": "tok-1"})
		}()
		req := pendingApproval(t, url, "t_pid")
		cmd := exec.CommandContext(t.Context(), natsBin, "pub", req.DecisionSubject,
			fmt.Sprintf(`{"digest":%q,"approved":true,"approver":"e2e-operator"}`, req.Digest))
		cmd.Env = append(natscli.Env(t), "NATS_URL="+url)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("nats pub: %v\n%s", err, out)
		}
		var r *mcp.CallToolResult
		select {
		case r = <-done:
		case <-time.After(60 * time.Second):
			t.Fatal("the approved call did not finish")
		}
		if r == nil {
			t.Fatal("the approved call failed")
		}
		wantResult(t, r, "ok", "")
		mu.Lock()
		got := slices.Clone(progress)
		mu.Unlock()
		if !slices.ContainsFunc(got, func(s string) bool { return strings.HasPrefix(s, "waiting for an operator's approval") }) {
			t.Errorf("progress notifications %q do not tell of the approval", got)
		}
	})

	t.Run("the canary reached no log and no NATS message", func(t *testing.T) {
		for i, b := range logs {
			if strings.Contains(b.String(), mcpCanary) {
				t.Errorf("coordinator log %d holds the canary", i)
			}
		}
		if strings.Contains(worker.log(), mcpCanary) {
			t.Error("the toolworker's log holds the canary")
		}
		scanStreamsFor(t, url, mcpCanary)
	})
}

func bearer(token string) *http.Client {
	return &http.Client{Transport: roundTripper(func(r *http.Request) (*http.Response, error) {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer "+token)
		return http.DefaultTransport.RoundTrip(r)
	})}
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func connect(t *testing.T, tr mcp.Transport, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, opts).Connect(ctx, tr, nil)
	if err != nil {
		t.Fatalf("MCP connect: %v", err)
	}
	return cs
}

func listTools(t *testing.T, cs *mcp.ClientSession) map[string]*mcp.Tool {
	t.Helper()
	out := map[string]*mcp.Tool{}
	for tool, err := range cs.Tools(t.Context(), nil) {
		if err != nil {
			t.Fatalf("tools/list: %v", err)
		}
		out[tool.Name] = tool
	}
	return out
}

func keys[V any](m map[string]V) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func callTool(t *testing.T, cs *mcp.ClientSession, name, args string, meta mcp.Meta) *mcp.CallToolResult {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: json.RawMessage(args), Meta: meta})
	if err != nil {
		t.Errorf("tools/call %s: %v", name, err)
		return nil
	}
	return r
}

// wantResult checks a result's outcome and, when text is not empty, its text.
func wantResult(t *testing.T, r *mcp.CallToolResult, outcome, text string) {
	t.Helper()
	if r == nil {
		t.Fatal("no result")
	}
	var got string
	for _, c := range r.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			got += tc.Text
		}
	}
	if o, _ := r.Meta["toolfleet/outcome"].(string); o != outcome || r.IsError != (outcome != "ok") {
		t.Errorf("outcome %q isError %v (text %q), want %s", o, r.IsError, got, outcome)
	}
	if text != "" && !strings.Contains(got, text) {
		t.Errorf("text %q, want %q", got, text)
	}
}

// waitForCatalog waits until every tool is in the catalog bucket.
func waitForCatalog(t *testing.T, url string, worker *proc, tools ...string) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	natstest.WaitFor(t, 60*time.Second, func() error {
		if worker.exited() {
			t.Fatalf("toolworker exited: %v\n%s", worker.err, worker.log())
		}
		kv, err := js.KeyValue(t.Context(), protocol.Subjects{}.CatalogBucket())
		if err != nil {
			return err
		}
		for _, tool := range tools {
			if _, err := kv.Get(t.Context(), tool); err != nil {
				return fmt.Errorf("%s: %w", tool, err)
			}
		}
		return nil
	})
}

// pendingApproval waits for the approval request of tool in the approvals
// stream.
func pendingApproval(t *testing.T, url, tool string) protocol.ApprovalRequest {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	var req protocol.ApprovalRequest
	natstest.WaitFor(t, 60*time.Second, func() error {
		st, err := js.Stream(t.Context(), protocol.Subjects{}.ApprovalsStream())
		if err != nil {
			return err
		}
		m, err := st.GetLastMsgForSubject(t.Context(), protocol.Subjects{}.ApprovalRequests())
		if err != nil {
			return err
		}
		r, err := protocol.DecodeApprovalRequest(m.Data, 0)
		if err != nil || string(r.Tool) != tool {
			return errors.New("no request for " + tool + " yet")
		}
		req = r
		return nil
	})
	return req
}

// scanStreamsFor fails the test if any message of any stream holds s.
func scanStreamsFor(t *testing.T, url, s string) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	names := js.StreamNames(t.Context())
	for name := range names.Name() {
		st, err := js.Stream(t.Context(), name)
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		for seq := info.State.FirstSeq; seq <= info.State.LastSeq && seq > 0; seq++ {
			m, err := st.GetMsg(t.Context(), seq)
			if err != nil {
				continue // deleted
			}
			if strings.Contains(string(m.Data), s) {
				t.Errorf("stream %s message %d (%s) holds the secret", name, seq, m.Subject)
			}
		}
	}
}
