package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolfleet/toolfleet/internal/mcpserve"
	"github.com/toolfleet/toolfleet/internal/natsbus/stores"
	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/mcptool"
	"github.com/toolfleet/toolfleet/pkg/mcptool/mcptooltest"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// mcpTool is the fleet name of the MCP server's echo tool.
const mcpTool = "mcp_echo"

// mcp measures one echo tools/call to a go-sdk MCP server (streamable HTTP
// on loopback) made directly with the SDK, then the same call as a fleet
// tool (loop → worker → MCP server), then through coordinator mcp's server
// (SDK client → mcpserve → fleet → worker → MCP server).
func (b *bench) mcp(ctx context.Context, f *fleet) error {
	endpoint, stop, err := serveHTTP(mcptooltest.Handler(""))
	if err != nil {
		return err
	}
	defer stop()
	n := b.p.loopSingle

	b.step("mcp: direct tools/call")
	direct, err := mcpLatency(ctx, endpoint, "echo", n, f.timeout)
	if err != nil {
		return fmt.Errorf("direct: %w", err)
	}
	b.add(row{name: "mcp: 1 echo tools/call directly (go-sdk client → streamable HTTP server)", s: direct})

	// The operator's manifest, not the server's annotations, lowers the
	// gate: the echo tool is harmless, run again or unapproved.
	yes, no := true, false
	srv, err := mcptool.Start(ctx, mcptool.ServerConfig{Name: "mcp", URL: endpoint, Logger: f.log, Idempotent: &yes, RequiresApproval: &no})
	if err != nil {
		return err
	}
	defer srv.Close()
	i := slices.IndexFunc(srv.Tools(), func(t harness.Tool) bool { return t.Name == mcpTool })
	if i < 0 {
		return errors.New("the MCP server does not list echo")
	}
	tool := srv.Tools()[i]
	h, err := harness.New(harness.Config{}, tool)
	if err != nil {
		return err
	}
	if err := stores.PublishSpecs(ctx, f.js, f.subjects, h.Specs(), f.log); err != nil {
		return err
	}
	if err := waitCatalog(ctx, f.catalog, mcpTool); err != nil {
		return err
	}
	ws, err := f.startWorkers(ctx, 1, 0, tool)
	if err != nil {
		return err
	}
	defer ws.stop()
	b.step("mcp: the same call as a fleet tool")
	viaFleet, err := f.loopLatency(ctx, n, 1, mcpTool, echoArgs, echoText)
	if err != nil {
		return fmt.Errorf("through the fleet: %w", err)
	}
	b.add(row{name: "mcp: the same call as a fleet tool, full loop round (loop → worker → MCP server)",
		s: viaFleet, ratio: ratio(viaFleet.p50, direct.p50) + " direct"})

	ms, err := mcpserve.New(mcpserve.Config{Logger: f.log}, mcpserve.Fleet{
		Catalog: f.catalog, Dispatcher: f.disp, Loop: loop.Config{Logger: f.log, ToolTimeout: f.toolTimeout},
	})
	if err != nil {
		return err
	}
	if err := ms.Sync(ctx); err != nil {
		return err
	}
	front, stopFront, err := serveHTTP(ms.Handler(mcpserve.HTTPConfig{}))
	if err != nil {
		return err
	}
	defer stopFront()
	b.step("mcp: the same call through coordinator mcp")
	viaFront, err := mcpLatency(ctx, front, mcpTool, n, f.timeout)
	if err != nil {
		return fmt.Errorf("through coordinator mcp: %w", err)
	}
	b.add(row{name: "mcp: the same call through coordinator mcp (client → mcpserve → fleet → worker → MCP server)",
		s: viaFront, ratio: ratio(viaFront.p50, direct.p50) + " direct"})
	return nil
}

// serveHTTP serves h on a loopback port.
func serveHTTP(h http.Handler) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go hs.Serve(ln)
	return "http://" + ln.Addr().String(), func() { hs.Close() }, nil
}

// mcpLatency times n echo calls of tool over one client session.
func mcpLatency(ctx context.Context, endpoint, tool string, n int, timeout time.Duration) (summary, error) {
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "fleetbench", Version: "1"}, nil).
		Connect(ctx, &mcp.StreamableClientTransport{Endpoint: endpoint}, nil)
	if err != nil {
		return summary{}, err
	}
	defer cs.Close()
	args := json.RawMessage(echoArgs)
	var s samples
	cpu := startCPU()
	for i := range warmup(n) + n {
		cctx, cancel := context.WithTimeout(ctx, timeout)
		start := time.Now()
		r, err := cs.CallTool(cctx, &mcp.CallToolParams{Name: tool, Arguments: args})
		d := time.Since(start)
		cancel()
		if err != nil {
			return summary{}, err
		}
		if tc, ok := firstText(r); r.IsError || !ok || tc != echoText {
			return summary{}, fmt.Errorf("%w: %s answered isError=%v %.80q", errNotOK, tool, r.IsError, tc)
		}
		if i >= warmup(n) {
			s.add(d)
		}
	}
	sum := s.summary()
	sum.cpu = cpu.per(warmup(n) + n)
	sum.msgs = cpu.msgsPer(warmup(n) + n)
	return sum, nil
}

func firstText(r *mcp.CallToolResult) (string, bool) {
	for _, c := range r.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			return tc.Text, true
		}
	}
	return "", false
}

// waitCatalog waits until the catalog lists tool.
func waitCatalog(ctx context.Context, c loop.Catalog, tool protocol.ToolName) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		specs, err := c.Tools(ctx)
		if err == nil && slices.ContainsFunc(specs, func(s protocol.ToolSpec) bool { return s.Name == tool }) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the catalog does not list %s within 10s", tool)
		}
		time.Sleep(5 * time.Millisecond) // polling the catalog, not synchronising
	}
}
