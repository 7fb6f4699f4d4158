package metrics_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolfleet/toolfleet/internal/metrics"
	"github.com/toolfleet/toolfleet/internal/metrics/metricstest"
)

type mcpServer struct {
	name                 string
	up                   bool
	restarts             int
	answered, unanswered int64
	kills                int64
}

func (s mcpServer) Name() string                { return s.name }
func (s mcpServer) Up() bool                    { return s.up }
func (s mcpServer) Restarts() int               { return s.restarts }
func (s mcpServer) CancelStats() (int64, int64) { return s.answered, s.unanswered }
func (s mcpServer) Kills() int64                { return s.kills }
func (s mcpServer) server() map[string]string   { return metricstest.L("server", s.name) }
func (s mcpServer) cancels(r string) map[string]string {
	return metricstest.L("server", s.name, "result", r)
}

// The MCP server metrics are read at each scrape; a name that is not a
// token is "_invalid", and a repeated name is one series.
func TestMCPServerMetrics(t *testing.T) {
	var servers []metrics.MCPServer
	reg := prometheus.NewRegistry()
	metrics.RegisterMCPServers(reg, func() []metrics.MCPServer { return servers })
	if f := metricstest.Gather(t, reg); len(f) != 0 {
		t.Fatalf("no servers yet, but %d families", len(f))
	}
	fs := mcpServer{name: "fs", up: true, restarts: 2, answered: 3, unanswered: 1, kills: 1}
	servers = []metrics.MCPServer{fs, mcpServer{name: "bad name {x}"}, mcpServer{name: "fs", restarts: 9}}
	f := metricstest.Gather(t, reg)
	for _, w := range []struct {
		name   string
		labels map[string]string
		v      float64
	}{
		{"toolfleet_mcp_server_up", fs.server(), 1},
		{"toolfleet_mcp_server_restarts_total", fs.server(), 2},
		{"toolfleet_mcp_server_cancels_total", fs.cancels(metrics.CancelAnswered), 3},
		{"toolfleet_mcp_server_cancels_total", fs.cancels(metrics.CancelUnanswered), 1},
		{"toolfleet_mcp_server_kills_total", fs.server(), 1},
		{"toolfleet_mcp_server_up", metricstest.L("server", metrics.InvalidLabel), 0},
	} {
		if err := f.Want(w.name, w.labels, w.v); err != nil {
			t.Error(err)
		}
	}
	if n := len(f["toolfleet_mcp_server_up"].GetMetric()); n != 2 {
		t.Errorf("%d up series, want 2 (fs and _invalid)", n)
	}
}
