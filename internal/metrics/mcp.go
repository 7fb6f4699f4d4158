package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// MCPServer is what the MCP server metrics read from a supervised MCP
// server (mcptool.Server), at each scrape.
type MCPServer interface {
	// Name is the server's name from the manifest.
	Name() string
	// Up reports whether the server is connected and serving calls.
	Up() bool
	// Restarts counts its restarts.
	Restarts() int
	// CancelStats counts the cancelled calls it answered within the grace,
	// and those it left unanswered.
	CancelStats() (answered, unanswered int64)
	// Kills counts the kills for a cancelled call left unanswered.
	Kills() int64
}

// MCPToolCounter is what an MCPServer may also implement: the number of
// tools it lists that are served (toolfleet_mcp_server_tools).
type MCPToolCounter interface {
	ToolCount() int
}

// Values of the result label of toolfleet_mcp_server_cancels_total.
const (
	CancelAnswered   = "answered"
	CancelUnanswered = "unanswered"
)

// mcpCollector reads the MCP servers' counters at each scrape.
type mcpCollector struct {
	servers                             func() []MCPServer
	up, restarts, cancels, kills, tools *prometheus.Desc
}

// RegisterMCPServers registers the metrics of a toolworker's MCP servers
// with reg, read at each scrape from servers (which may return none yet):
//
//	toolfleet_mcp_server_up{server}               1 while connected, 0 while restarting
//	toolfleet_mcp_server_restarts_total{server}   restarts (a crash, a kill, a broken connection)
//	toolfleet_mcp_server_cancels_total{server,result}  cancelled calls answered within the grace or not
//	toolfleet_mcp_server_kills_total{server}      kills for a cancelled call left unanswered
//	toolfleet_mcp_server_tools{server}            tools it lists that are served (0: it lists none; servers implementing MCPToolCounter)
//
// The server label is the manifest's name (at most MaxToolLabels of them;
// a name that is not a token is "_invalid").
func RegisterMCPServers(reg prometheus.Registerer, servers func() []MCPServer) {
	name := func(n string) string { return prometheus.BuildFQName(Namespace, "mcp_server", n) }
	reg.MustRegister(&mcpCollector{
		servers: servers,
		up: prometheus.NewDesc(name("up"),
			"1 while the MCP server is connected and serving calls, 0 while it restarts.", []string{"server"}, nil),
		restarts: prometheus.NewDesc(name("restarts_total"),
			"Restarts of the MCP server: it exited, broke its connection or was killed.", []string{"server"}, nil),
		cancels: prometheus.NewDesc(name("cancels_total"),
			"Cancelled calls (deadline or cancel) of a stdio MCP server, by whether it answered them within the grace.", []string{"server", "result"}, nil),
		kills: prometheus.NewDesc(name("kills_total"),
			"Kills of the MCP server for a cancelled call left unanswered past the grace.", []string{"server"}, nil),
		tools: prometheus.NewDesc(name("tools"),
			"Tools the MCP server lists that the worker serves; 0 while it lists none (the worker waits for tools/list_changed).", []string{"server"}, nil),
	})
}

func (c *mcpCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.up
	ch <- c.restarts
	ch <- c.cancels
	ch <- c.kills
	ch <- c.tools
}

func (c *mcpCollector) Collect(ch chan<- prometheus.Metric) {
	seen := map[string]bool{}
	for _, s := range c.servers() {
		n := s.Name()
		if !protocol.ValidToken(n) || len(n) > 64 {
			n = InvalidLabel
		}
		if seen[n] || len(seen) >= MaxToolLabels {
			continue // one series per name
		}
		seen[n] = true
		up := 0.0
		if s.Up() {
			up = 1
		}
		answered, unanswered := s.CancelStats()
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, up, n)
		ch <- prometheus.MustNewConstMetric(c.restarts, prometheus.CounterValue, float64(s.Restarts()), n)
		ch <- prometheus.MustNewConstMetric(c.cancels, prometheus.CounterValue, float64(answered), n, CancelAnswered)
		ch <- prometheus.MustNewConstMetric(c.cancels, prometheus.CounterValue, float64(unanswered), n, CancelUnanswered)
		ch <- prometheus.MustNewConstMetric(c.kills, prometheus.CounterValue, float64(s.Kills()), n)
		if tc, ok := s.(MCPToolCounter); ok {
			ch <- prometheus.MustNewConstMetric(c.tools, prometheus.GaugeValue, float64(tc.ToolCount()), n)
		}
	}
}
