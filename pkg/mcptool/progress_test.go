package mcptool_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolfleet/toolfleet/internal/testsync"
	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/mcptool"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// TestServerProgressBecomesTheCallsProgress: an MCP server's
// notifications/progress for a call reach the call's harness sink,
// redacted; without a sink they go nowhere.
func TestServerProgressBecomesTheCallsProgress(t *testing.T) {
	release := make(chan struct{}) // the tool answers once its progress arrived
	srv := mcp.NewServer(&mcp.Implementation{Name: "progress", Version: "1"}, nil)
	srv.AddTool(&mcp.Tool{Name: "steps", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			if tok := req.Params.GetProgressToken(); tok != nil {
				for i, msg := range []string{"reading Bearer " + canary, "", "done"} {
					_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
						ProgressToken: tok, Message: msg, Progress: float64(i + 1), Total: 3,
					})
				}
				// A token of no call of ours.
				_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: "other", Message: "x", Progress: 1})
			}
			select {
			case <-release:
			case <-ctx.Done():
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ok"}}}, nil
		})
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	defer hs.Close()
	cfgs, err := mcptool.ParseManifest([]byte(`{"mcp_servers":[{"name":"p","url":"`+hs.URL+`","headers_from_env":{"Authorization":"P_AUTH"}}]}`), "", func(k string) string {
		if k == "P_AUTH" {
			return "Bearer " + canary
		}
		return ""
	})
	if err != nil {
		t.Fatal(err)
	}
	s, err := mcptool.Start(t.Context(), cfgs[0])
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	defer s.Close()
	h, err := harness.New(harness.Config{}, s.Tools()...)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var got []string
	sink := func(msg string) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, msg)
	}
	ctx, cancel := context.WithTimeout(harness.WithProgress(t.Context(), sink), 20*time.Second)
	defer cancel()
	done := make(chan harness.Result, 1)
	go func() { done <- h.Execute(ctx, harness.Call{Tool: "p_steps", Arguments: json.RawMessage(`{}`)}) }()
	testsync.WaitUntil(t, 15*time.Second, "three progress reports", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) >= 3
	})
	close(release)
	if r := <-done; r.Outcome != protocol.OutcomeOK || r.Output != "ok" {
		t.Fatalf("result %+v", r)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{"reading " + mcptool.Redacted + " (1/3)", "2/3", "done (3/3)"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("progress %q, want %q", got, want)
	}
}
