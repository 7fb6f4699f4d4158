package mcpserve_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/mcpserve"
	"github.com/toolfleet/toolfleet/internal/natstest"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// approvalWatch collects the approval requests and outcome notes of a
// fleet.
type approvalWatch struct {
	mu    sync.Mutex
	reqs  []protocol.ApprovalRequest
	notes map[protocol.CallKey]string
}

func watchApprovals(t *testing.T, f *fleet) *approvalWatch {
	t.Helper()
	w := &approvalWatch{notes: map[protocol.CallKey]string{}}
	sub, err := f.nc.Subscribe(f.s.Approvals(), func(m *nats.Msg) {
		w.mu.Lock()
		defer w.mu.Unlock()
		if r, err := protocol.DecodeApprovalRequest(m.Data, 0); err == nil && r.Tool != "" {
			w.reqs = append(w.reqs, r)
			return
		}
		if n, err := protocol.DecodeApprovalNote(m.Data); err == nil {
			tokens := strings.Split(m.Subject, ".")
			w.notes[protocol.CallKey(tokens[len(tokens)-1])] = n.Outcome
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Unsubscribe() })
	if err := f.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return w
}

// waitRequests waits for n approval requests and returns them.
func (w *approvalWatch) waitRequests(t *testing.T, n int) []protocol.ApprovalRequest {
	t.Helper()
	var out []protocol.ApprovalRequest
	natstest.WaitFor(t, 60*time.Second, func() error {
		w.mu.Lock()
		defer w.mu.Unlock()
		if len(w.reqs) < n {
			return fmt.Errorf("%d approval requests, want %d", len(w.reqs), n)
		}
		out = append([]protocol.ApprovalRequest(nil), w.reqs...)
		return nil
	})
	return out
}

// postCall sends one tools/call over HTTP as a client of protocol version
// 2025-06-18 (which the SDK does not tie to the request's context) would,
// until ctx ends.
func postCall(ctx context.Context, url, token, tool string) error {
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":%q,"arguments":{}}}`, tool)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("MCP-Protocol-Version", "2025-06-18")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, err = io.ReadAll(resp.Body)
	return err
}

// A fault (issue 24, M2): an HTTP client calls a gated tool and goes away
// while the call waits for the operator. The call is cancelled at once
// (its approval wait ends "cancelled"), and the operator's approval that
// comes later runs nothing: no call is ever published.
func TestHTTPClientThatLeavesCancelsItsApprovalWait(t *testing.T) {
	f := newFleet(t, 0)
	w := watchApprovals(t, f)
	srv := httptest.NewServer(f.ms.Handler(mcpserve.HTTPConfig{Tokens: []string{"good-token"}}))
	defer srv.Close()
	ctx, leave := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- postCall(ctx, srv.URL, "good-token", "deploy") }()
	req := w.waitRequests(t, 1)[0]
	leave()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("the client's request ended with %v, want its cancellation", err)
	}
	natstest.WaitFor(t, 60*time.Second, func() error {
		w.mu.Lock()
		defer w.mu.Unlock()
		if got := w.notes[req.CallKey]; got != protocol.NoteCancelled {
			return fmt.Errorf("approval outcome %q, want %q", got, protocol.NoteCancelled)
		}
		return nil
	})
	body := fmt.Sprintf(`{"digest":%q,"approved":true,"reason":"late","approver":"test"}`, req.Digest)
	if err := f.nc.Publish(req.DecisionSubject, []byte(body)); err != nil {
		t.Fatal(err)
	}
	// Every call the fleet publishes goes through the calls stream: it
	// never held one.
	js, _ := jetstream.New(f.nc)
	st, err := js.Stream(t.Context(), f.s.CallsStream())
	if err != nil {
		t.Fatal(err)
	}
	if info, err := st.Info(t.Context()); err != nil || info.State.LastSeq != 0 {
		t.Fatalf("calls stream %+v, %v: a call was published after its client left", info.State, err)
	}
}

// A flood (issue 24, M3): calls past MaxConcurrentCalls are refused at once
// with a JSON-RPC error that says so, and never reach the fleet; once calls
// end, their slots serve again.
func TestHTTPCallsBeyondTheBoundAreRefused(t *testing.T) {
	f := newFleetWith(t, 0, mcpserve.Config{ProgressInterval: time.Hour, MaxConcurrentCalls: 2})
	w := watchApprovals(t, f)
	srv := httptest.NewServer(f.ms.Handler(mcpserve.HTTPConfig{Tokens: []string{"good-token"}}))
	defer srv.Close()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(t.Context(), &mcp.StreamableClientTransport{
		Endpoint: srv.URL, HTTPClient: &http.Client{Transport: bearerTransport("good-token")}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	results := make(chan *mcp.CallToolResult, 2)
	for range 2 {
		go func() {
			r, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "deploy", Arguments: map[string]any{}})
			if err != nil {
				t.Error(err)
			}
			results <- r
		}()
	}
	reqs := w.waitRequests(t, 2)
	_, err = cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "one more"}})
	if err == nil || !strings.Contains(err.Error(), "overloaded") || !strings.Contains(err.Error(), "2 calls") {
		t.Fatalf("a third call at once: %v, want an overload error", err)
	}
	for _, req := range reqs {
		body := fmt.Sprintf(`{"digest":%q,"approved":false,"reason":"no","approver":"test"}`, req.Digest)
		if err := f.nc.Publish(req.DecisionSubject, []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		if r := <-results; r != nil {
			check(t, r, "denied", "")
		}
	}
	r, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "served again"}})
	if err != nil {
		t.Fatal(err)
	}
	check(t, r, "ok", "served again")
}

// An attack (issue 24, L2): a web page's request, with a valid token and a
// foreign Origin, is refused; one without an Origin, or from an origin the
// operator allowed, is served.
func TestHTTPRefusesAForeignOrigin(t *testing.T) {
	f := newFleet(t, 0)
	srv := httptest.NewServer(f.ms.Handler(mcpserve.HTTPConfig{Tokens: []string{"good-token"},
		AllowedOrigins: []string{"https://console.example.com"}}))
	defer srv.Close()
	list := []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}`)
	post := func(origin ...string) int {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL, bytes.NewReader(list))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Authorization", "Bearer good-token")
		for _, o := range origin {
			req.Header.Add("Origin", o)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, tc := range []struct {
		origin []string
		want   int
	}{
		{[]string{"https://evil.example"}, http.StatusForbidden},
		{[]string{"null"}, http.StatusForbidden},
		{[]string{srv.URL}, http.StatusForbidden}, // not configured: not even the server's own
		{[]string{"https://console.example.com", "https://evil.example"}, http.StatusForbidden},
		{nil, http.StatusOK},
		{[]string{"https://Console.example.com/"}, http.StatusOK},
	} {
		if got := post(tc.origin...); got != tc.want {
			t.Errorf("Origin %q: %d, want %d", tc.origin, got, tc.want)
		}
	}
}

// Issue 35, finding 5: a server bound to 127.0.0.1 serves a browser page
// of its own host — Origin http://localhost:PORT, http://127.0.0.1:PORT,
// http://[::1]:PORT — and refuses every other origin not listed, another
// port of localhost and a look-alike name among them.
func TestHTTPAcceptsItsOwnOrigins(t *testing.T) {
	f := newFleet(t, 0)
	srv := httptest.NewUnstartedServer(nil)
	addr := srv.Listener.Addr().String()
	srv.Config.Handler = f.ms.Handler(mcpserve.HTTPConfig{Tokens: []string{"good-token"}, Addr: addr})
	srv.Start()
	defer srv.Close()
	_, port, _ := net.SplitHostPort(addr)
	list := []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}`)
	for _, tc := range []struct {
		origin string
		want   int
	}{
		{"http://localhost:" + port, http.StatusOK},
		{"http://127.0.0.1:" + port, http.StatusOK},
		{"http://[::1]:" + port, http.StatusOK},
		{"HTTP://LOCALHOST:" + port + "/", http.StatusOK},
		{"http://localhost:1", http.StatusForbidden},
		{"http://localhost", http.StatusForbidden},
		{"http://evil.example:" + port, http.StatusForbidden},
		{"http://localhost.evil.example:" + port, http.StatusForbidden},
		{"null", http.StatusForbidden},
	} {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL, bytes.NewReader(list))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Authorization", "Bearer good-token")
		req.Header.Set("Origin", tc.origin)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("Origin %q: %d, want %d", tc.origin, resp.StatusCode, tc.want)
		}
	}
}
