package worker_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/internal/natstest"
	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/mcptool/mcptooltest"
	"github.com/toolfleet/toolfleet/pkg/protocol"
	"github.com/toolfleet/toolfleet/pkg/worker"
)

var mcpServerBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "worker-test-")
	if err != nil {
		panic(err)
	}
	if mcpServerBin, err = mcptooltest.Build(dir); err != nil {
		os.RemoveAll(dir)
		panic(err)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// TestMCPServerToolsReachTheCatalogAndFollowListChanges runs a worker whose
// manifest has an MCP server beside a built-in: its tools are
// published, a call runs through the fleet, and a tool the server adds
// (tools/list_changed) reaches the catalog and is served.
func TestMCPServerToolsReachTheCatalogAndFollowListChanges(t *testing.T) {
	srv := natstest.Start(t)
	dir := t.TempDir()
	manifest := filepath.Join(dir, "tools.json")
	data, _ := json.Marshal(map[string]any{"mcp_servers": []any{map[string]any{
		"name": "m", "command": []string{mcpServerBin, "1"}, "requires_approval": false,
	}}})
	if err := os.WriteFile(manifest, data, 0o644); err != nil {
		t.Fatal(err)
	}
	runWorker(t, srv, worker.Config{Tools: []harness.Tool{harness.Echo()}, Name: "mcp-worker", Logger: zerolog.Nop()}, manifest)

	nc := natstest.Connect(t, srv)
	js, _ := jetstream.New(nc)
	subjects := protocol.Subjects{}
	waitTool := func(name string) {
		natstest.WaitFor(t, 30*time.Second, func() error {
			kv, err := js.KeyValue(t.Context(), subjects.CatalogBucket())
			if err != nil {
				return err
			}
			_, err = kv.Get(t.Context(), name)
			return err
		})
	}
	waitTool("m_echo")
	waitTool("echo")

	call := func(tool protocol.ToolName, args string) protocol.Result {
		t.Helper()
		return callTool(t, nc, tool, args, 20*time.Second)
	}
	if r := call("m_echo", `{"text":"through the fleet"}`); r.Outcome != protocol.OutcomeOK || r.Output != "through the fleet" {
		t.Fatalf("m_echo: %+v", r)
	}
	if r := call("m_add_tool", `{"name":"fresh"}`); r.Outcome != protocol.OutcomeOK {
		t.Fatalf("m_add_tool: %+v", r)
	}
	waitTool("m_fresh")
	// The worker serves the new list once its calls are done: a call to
	// the new tool may wait in its consumer until then.
	if r := call("m_fresh", `{}`); r.Outcome != protocol.OutcomeOK || r.Output != "new tool fresh" {
		t.Fatalf("m_fresh: %+v", r)
	}
	if r := call("echo", `{"text":"built-in still served"}`); r.Output != "built-in still served" {
		t.Fatalf("echo after the reload: %+v", r)
	}
}
