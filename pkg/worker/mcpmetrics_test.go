package worker_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/internal/metrics/metricstest"
	"github.com/toolfleet/toolfleet/internal/natstest"
	"github.com/toolfleet/toolfleet/pkg/protocol"
	"github.com/toolfleet/toolfleet/pkg/worker"
)

// A worker's MCP servers are in its registry: a tool that ignores its cancel
// gets its server killed and restarted, and the scrape shows the
// unanswered cancel, the kill, the restart and the server up again.
func TestMCPServerMetricsAfterAForcedRestart(t *testing.T) {
	srv := natstest.Start(t)
	dir := t.TempDir()
	manifest := filepath.Join(dir, "tools.json")
	data, _ := json.Marshal(map[string]any{"mcp_servers": []any{map[string]any{
		"name": "m", "command": []string{mcpServerBin, "1"}, "cancel_grace": "100ms", "requires_approval": false,
	}}})
	if err := os.WriteFile(manifest, data, 0o644); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	runWorker(t, srv, worker.Config{Name: "mcp-metered", Metrics: reg, Logger: zerolog.Nop()}, manifest)
	server := metricstest.L("server", "m")
	natstest.WaitFor(t, 60*time.Second, func() error {
		return metricstest.Gather(t, reg).Want("toolfleet_mcp_server_up", server, 1)
	})
	if err := metricstest.Gather(t, reg).Want("toolfleet_mcp_server_restarts_total", server, 0); err != nil {
		t.Fatal(err)
	}

	// The deadline leaves the call time to reach the worker on a loaded
	// machine; the tool then outlives it.
	if r := callTool(t, natstest.Connect(t, srv), "m_hang", `{}`, 3*time.Second); r.Outcome != protocol.OutcomeTimeout {
		t.Fatalf("m_hang: %+v, want timeout", r)
	}
	natstest.WaitFor(t, 60*time.Second, func() error {
		f := metricstest.Gather(t, reg)
		for _, w := range []struct {
			name   string
			labels map[string]string
			v      float64
		}{
			{"toolfleet_mcp_server_cancels_total", metricstest.L("server", "m", "result", "unanswered"), 1},
			{"toolfleet_mcp_server_cancels_total", metricstest.L("server", "m", "result", "answered"), 0},
			{"toolfleet_mcp_server_kills_total", server, 1},
			{"toolfleet_mcp_server_restarts_total", server, 1},
			{"toolfleet_mcp_server_up", server, 1},
		} {
			if err := f.Want(w.name, w.labels, w.v); err != nil {
				return err
			}
		}
		return nil
	})
}
