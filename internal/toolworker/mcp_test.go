package toolworker_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natstest"
	"github.com/toolfleet/toolfleet/internal/toolworker"
	"github.com/toolfleet/toolfleet/pkg/mcptool/mcptooltest"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

var mcpServerBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "toolworker-test-")
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
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- toolworker.Run(runCtx, toolworker.Config{
			Conn:      natsbus.ConnConfig{URL: srv.ClientURL()},
			ToolsFile: manifest,
			Builtins:  []string{"echo"},
			Name:      "mcp-worker",
			Logger:    zerolog.Nop(),
		})
	}()
	defer func() {
		stop()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run = %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("Run did not return")
		}
	}()

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

	d := natsbus.NewDispatcher(nc, js, subjects, natsbus.DispatcherConfig{})
	call := func(tool, args string) protocol.Result {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		run := protocol.NewID()
		in, err := d.Open(ctx, run)
		if err != nil {
			t.Fatal(err)
		}
		defer in.Close()
		c := protocol.Call{V: 1, RunID: run, Round: 1, CallKey: protocol.NewID(), Tool: tool,
			Arguments: []byte(args), Deadline: time.Now().Add(20 * time.Second), Attempt: 1}
		if err := d.Publish(ctx, c); err != nil {
			t.Fatal(err)
		}
		for {
			select {
			case ev := <-in.Events():
				if ev.Result != nil && ev.Result.CallKey == c.CallKey {
					return *ev.Result
				}
			case <-ctx.Done():
				t.Fatalf("no result for %s", tool)
			}
		}
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
