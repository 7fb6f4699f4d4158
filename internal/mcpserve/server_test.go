package mcpserve_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/approval"
	"github.com/toolfleet/toolfleet/internal/mcpserve"
	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natsbus/dispatch"
	"github.com/toolfleet/toolfleet/internal/natsbus/stores"
	"github.com/toolfleet/toolfleet/internal/natsbus/workerbus"
	"github.com/toolfleet/toolfleet/internal/natstest"
	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// fleet is a real fleet on an embedded server: one worker serving echo, a
// gated tool and a tool that outlives its deadline, and an MCP server over
// its catalog.
type fleet struct {
	ms *mcpserve.Server
	nc *nats.Conn
	s  protocol.Subjects
	cs *mcp.ClientSession

	mu       sync.Mutex
	progress []string
}

func newFleet(t *testing.T, toolTimeout time.Duration) *fleet {
	t.Helper()
	return newFleetWith(t, toolTimeout, mcpserve.Config{ProgressInterval: time.Hour})
}

// newFleetWith is newFleet with the MCP server's configuration cfg.
func newFleetWith(t *testing.T, toolTimeout time.Duration, cfg mcpserve.Config) *fleet {
	t.Helper()
	ctx := t.Context()
	srv := natstest.Start(t)
	f := &fleet{nc: natstest.Connect(t, srv)}
	js, err := jetstream.New(f.nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := natsbus.EnsureStreams(ctx, js, f.s, natsbus.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	gated := harness.Tool{Name: "deploy", RequiresApproval: true, Parameters: json.RawMessage(`{"type":"object"}`),
		Run: func(context.Context, json.RawMessage) (string, error) { return "deployed", nil }}
	slow := harness.Tool{Name: "slow", Idempotent: true, Parameters: json.RawMessage(`{"type":"object"}`),
		Run: func(ctx context.Context, _ json.RawMessage) (string, error) {
			harness.ReportProgress(ctx, "slowly working")
			<-ctx.Done()
			return "", ctx.Err()
		}}
	h, err := harness.New(harness.Config{}, harness.Echo(), gated, slow)
	if err != nil {
		t.Fatal(err)
	}
	w, err := workerbus.NewWorker(natstest.Connect(t, srv), js, f.s, h, workerbus.WorkerConfig{Name: "w1"})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(wctx) }()
	t.Cleanup(func() { cancel(); <-done })
	if err := stores.PublishSpecs(ctx, js, f.s, h.Specs(), natstest.NewLogBuffer(t).Logger()); err != nil {
		t.Fatal(err)
	}
	cat, err := stores.NewCatalog(ctx, js, f.s, natstest.NewLogBuffer(t).Logger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cat.Close() })
	ms, err := mcpserve.New(cfg, mcpserve.Fleet{
		Catalog:    cat,
		Dispatcher: dispatch.NewDispatcher(f.nc, js, f.s, dispatch.DispatcherConfig{}),
		Gate:       approval.NewGate(f.nc, js, f.s, approval.GateConfig{}),
		Loop:       loop.Config{ApprovalTimeout: time.Minute, ToolTimeout: toolTimeout},
	})
	if err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 30*time.Second, func() error {
		if err := ms.Sync(ctx); err != nil {
			return err
		}
		if n := len(ms.Tools()); n != 3 {
			return fmt.Errorf("%d tools served", n)
		}
		return nil
	})
	f.ms = ms
	st, ct := mcp.NewInMemoryTransports()
	ss, err := ms.MCP().Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	f.cs, err = mcp.NewClient(&mcp.Implementation{Name: "test"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			f.mu.Lock()
			f.progress = append(f.progress, r.Params.Message)
			f.mu.Unlock()
		},
	}).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.cs.Close() })
	return f
}

func (f *fleet) call(t *testing.T, name, args string, meta mcp.Meta) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	r, err := f.cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: json.RawMessage(args), Meta: meta})
	if err != nil {
		t.Fatalf("tools/call %s: %v", name, err)
	}
	return r
}

func check(t *testing.T, r *mcp.CallToolResult, outcome, text string) {
	t.Helper()
	got := r.Content[0].(*mcp.TextContent).Text
	if r.Meta[mcpserve.MetaOutcome] != outcome || r.IsError != (outcome != "ok") || !strings.Contains(got, text) {
		t.Fatalf("result %v isError %v %q, want %s with %q", r.Meta[mcpserve.MetaOutcome], r.IsError, got, outcome, text)
	}
}

func TestToolsAndCalls(t *testing.T) {
	f := newFleet(t, 0)
	var names []string
	for tool, err := range f.cs.Tools(t.Context(), nil) {
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, tool.Name)
		if tool.Name == "echo" && (!tool.Annotations.IdempotentHint || !strings.Contains(fmt.Sprint(tool.InputSchema), "text")) {
			t.Errorf("echo: %+v", tool)
		}
	}
	if !slices.Equal(names, []string{"deploy", "echo", "slow"}) {
		t.Fatalf("tools/list: %v", names)
	}
	check(t, f.call(t, "echo", `{"text":"hi"}`, nil), "ok", "hi")
	check(t, f.call(t, "echo", `{"text":7}`, nil), "invalid_arguments", "Tool 'echo'")
	if _, err := f.cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "nope", Arguments: map[string]any{}}); err == nil {
		t.Error("calling an unknown tool is no protocol error")
	}
}

func TestDeadlineAnswersTimeout(t *testing.T) {
	f := newFleet(t, time.Second)
	check(t, f.call(t, "slow", `{}`, nil), "timeout", "Tool 'slow' timed out after 1s")
}

// TestProgressNamesTheWorker: a client that sent a progressToken is told
// which worker started its call, an idempotent one included (its
// dispatcher asks the fleet for the notice the loop alone would not need).
func TestProgressNamesTheWorker(t *testing.T) {
	f := newFleet(t, 0)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := f.cs.CallTool(ctx, &mcp.CallToolParams{Name: "slow", Arguments: map[string]any{}, Meta: mcp.Meta{"progressToken": "p"}})
		done <- err
	}()
	natstest.WaitFor(t, 30*time.Second, func() error {
		f.mu.Lock()
		defer f.mu.Unlock()
		if !slices.Contains(f.progress, "started on worker w1 (attempt 1)") {
			return fmt.Errorf("progress %q does not name the worker", f.progress)
		}
		return nil
	})
	cancel()
	<-done
}

func TestClientCancelEndsTheCall(t *testing.T) {
	f := newFleet(t, 0)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	if _, err := f.cs.CallTool(ctx, &mcp.CallToolParams{Name: "slow", Arguments: map[string]any{}}); err == nil {
		t.Fatal("a call cancelled by its client returned a result")
	}
	check(t, f.call(t, "echo", `{"text":"still serving"}`, nil), "ok", "still serving")
}

func TestApprovalOutcomeIsTheResult(t *testing.T) {
	f := newFleet(t, 0)
	reqs := make(chan protocol.ApprovalRequest, 4)
	sub, err := f.nc.Subscribe(f.s.ApprovalRequests(), func(m *nats.Msg) {
		if r, err := protocol.DecodeApprovalRequest(m.Data, 0); err == nil {
			reqs <- r
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	f.nc.Flush()
	for _, tc := range []struct {
		approved bool
		outcome  string
		text     string
	}{{false, "denied", "not today"}, {true, "ok", "deployed"}} {
		done := make(chan *mcp.CallToolResult, 1)
		go func() { done <- f.call(t, "deploy", `{}`, mcp.Meta{"progressToken": "p"}) }()
		var req protocol.ApprovalRequest
		select {
		case req = <-reqs:
		case <-time.After(30 * time.Second):
			t.Fatal("no approval request")
		}
		body := fmt.Sprintf(`{"digest":%q,"approved":%v,"reason":"not today","approver":"test"}`, req.Digest, tc.approved)
		if err := f.nc.Publish(req.DecisionSubject, []byte(body)); err != nil {
			t.Fatal(err)
		}
		check(t, <-done, tc.outcome, tc.text)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !slices.ContainsFunc(f.progress, func(s string) bool { return strings.HasPrefix(s, "waiting for an operator's approval") }) {
		t.Errorf("progress %q does not tell of the approval", f.progress)
	}
}

func TestHTTPHandlerAuthenticatesAndBoundsRequests(t *testing.T) {
	f := newFleet(t, 0)
	srv := httptest.NewServer(f.ms.Handler(mcpserve.HTTPConfig{Tokens: []string{"good-token"}}))
	defer srv.Close()
	post := func(token string, body []byte) int {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	list := []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}`)
	if code := post("", list); code != http.StatusUnauthorized {
		t.Errorf("no token: %d", code)
	}
	if code := post("bad-token", list); code != http.StatusUnauthorized {
		t.Errorf("a wrong token: %d", code)
	}
	huge := []byte(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":"` +
		strings.Repeat("x", 2<<20) + `"}}}`)
	if code := post("good-token", huge); code != http.StatusRequestEntityTooLarge {
		t.Errorf("a 2 MiB request: %d, want 413", code)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(t.Context(), &mcp.StreamableClientTransport{
		Endpoint: srv.URL, HTTPClient: &http.Client{Transport: bearerTransport("good-token")}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	r, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "over http"}})
	if err != nil {
		t.Fatal(err)
	}
	check(t, r, "ok", "over http")
}

type bearerTransport string

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+string(b))
	return http.DefaultTransport.RoundTrip(r)
}
