package e2e

import (
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolfleet/toolfleet/internal/testsync"
)

// TestMCPServerProgressReachesTheClient: server-everything's long-running
// operation sends notifications/progress to the worker that runs it; the
// fleet carries them to "coordinator mcp", which sends them on to its MCP
// client as notifications/progress.
func TestMCPServerProgressReachesTheClient(t *testing.T) {
	t.Parallel()
	if npmMCP.skip != "" {
		t.Skip(npmMCP.skip)
	}
	node, _ := exec.LookPath("node")
	f := newFleet(t)
	manifest := f.writeJSON("npm-progress.json", map[string]any{"mcp_servers": []any{map[string]any{
		"name":    "ev",
		"command": []string{node, npmServerScript(npmMCP.dir, "server-everything"), "stdio"},
		"allow":   []string{"trigger-long-running-operation"},
		// The operator's manifest, never the server's annotations, lowers
		// an MCP tool's gate.
		"requires_approval": false,
	}}})
	worker := startProcEnv(t, "toolworker", nil, bins.toolworker,
		"--nats-url", f.url(), "--tools", manifest, "--name", "npm", "--log-level", "debug")
	waitForCatalog(t, f.url(), worker, "ev_trigger-long-running-operation")

	cmd := exec.Command(bins.coordinator, "mcp", "--workers", "0", "--nats-url", f.url(), "--log-level", "debug")
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	cmd.Stderr = &testsync.Buffer{}
	var mu sync.Mutex
	var progress []string
	cs := connect(t, &mcp.CommandTransport{Command: cmd}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			mu.Lock()
			defer mu.Unlock()
			progress = append(progress, r.Params.Message)
		},
	})
	defer cs.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 120*time.Second)
	defer cancel()
	r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "ev_trigger-long-running-operation",
		Arguments: json.RawMessage(`{"duration": 2, "steps": 4}`), Meta: mcp.Meta{"progressToken": "lro"}})
	if err != nil || r.IsError {
		t.Fatalf("tools/call: %v %+v", err, r)
	}
	// The server's reports carry its step count: "…(n/4)" or "n/4".
	testsync.WaitUntil(t, 30*time.Second, "the server's progress", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, m := range progress {
			if strings.Contains(m, "/4") {
				return true
			}
		}
		return false
	})
	mu.Lock()
	t.Logf("progress the client saw: %q", progress)
	mu.Unlock()
}
