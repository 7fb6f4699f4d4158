package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolfleet/toolfleet/internal/metrics/metricstest"
	"github.com/toolfleet/toolfleet/internal/natstest"
	"github.com/toolfleet/toolfleet/internal/toolworker"
	"github.com/toolfleet/toolfleet/pkg/mcptool/mcptooltest"
	"github.com/toolfleet/toolfleet/pkg/protocol"
	"github.com/toolfleet/toolfleet/pkg/worker"
)

// An MCP server that lists no tools (issue 24), at start and again after a
// change — a real server built with the official SDK that follows a file
// for its tool list: the worker keeps running, warns and shows
// toolfleet_mcp_server_tools 0, and serves the tools once the server lists
// them (notifications/tools/list_changed).
func TestMCPServerThatListsNoToolsKeepsTheWorker(t *testing.T) {
	srv := natstest.Start(t)
	dir := t.TempDir()
	list := filepath.Join(dir, "tool-list")
	manifest := filepath.Join(dir, "tools.json")
	data, _ := json.Marshal(map[string]any{"mcp_servers": []any{map[string]any{
		"name": "m", "command": []string{mcpServerBin, "follow"}, "requires_approval": false,
		"env": map[string]string{mcptooltest.EnvToolsFile: list},
	}}})
	if err := os.WriteFile(manifest, data, 0o644); err != nil {
		t.Fatal(err)
	}
	logs := natstest.NewLogBuffer(t)
	reg := prometheus.NewRegistry()
	cfg, err := toolworker.Load(worker.Config{Name: "mcp-empty", Metrics: reg, Logger: logs.Logger()}, manifest, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	w, err := worker.New(natstest.Connect(t, srv), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run = %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("Run did not return")
		}
	})
	running := func() error {
		select {
		case err := <-done:
			done <- err
			t.Fatalf("the worker stopped: %v\n%s", err, logs.String())
		default:
		}
		return nil
	}
	server := metricstest.L("server", "m")
	waitEmpty := func(warnings int) {
		t.Helper()
		natstest.WaitFor(t, 60*time.Second, func() error {
			running()
			if n := strings.Count(logs.String(), "no tools to serve"); n < warnings {
				return fmt.Errorf("%d warnings, want %d", n, warnings)
			}
			f := metricstest.Gather(t, reg)
			if err := f.Want("toolfleet_mcp_server_up", server, 1); err != nil {
				return err
			}
			return f.Want("toolfleet_mcp_server_tools", server, 0)
		})
	}
	nc := natstest.Connect(t, srv)
	js, _ := jetstream.New(nc)
	serves := func(tool protocol.ToolName) {
		t.Helper()
		natstest.WaitFor(t, 60*time.Second, func() error {
			running()
			kv, err := js.KeyValue(t.Context(), protocol.Subjects{}.CatalogBucket())
			if err != nil {
				return err
			}
			if _, err := kv.Get(t.Context(), string(tool)); err != nil {
				return fmt.Errorf("%s: %w", tool, err)
			}
			return metricstest.Gather(t, reg).Want("toolfleet_mcp_server_tools", server, 1)
		})
		if r := callTool(t, nc, tool, `{}`, 20*time.Second); r.Outcome != protocol.OutcomeOK || !strings.HasPrefix(r.Output, "tool ") {
			t.Fatalf("%s: %+v", tool, r)
		}
	}
	waitEmpty(1) // at start
	setList(t, list, "late")
	serves("m_late")
	setList(t, list, "") // after a change
	waitEmpty(2)
	setList(t, list, "again")
	serves("m_again")
	if errors.Is(ctx.Err(), context.Canceled) {
		t.Fatal("stopped early")
	}
}

// setList writes the follow server's tool list.
func setList(t *testing.T, path, tools string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(tools), 0o644); err != nil {
		t.Fatal(err)
	}
}
