package mcptool

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// tracker watches one stdio connection: it notes the requests in flight,
// calls stuck when a cancelled one is still unanswered after grace, and
// remembers whether the connection broke on an oversized message.
type tracker struct {
	grace time.Duration
	stuck func()
	// answeredN counts cancelled requests the server answered in time.
	answeredN *atomic.Int64

	mu       sync.Mutex
	inflight map[string]bool
	timers   map[string]*time.Timer
	tooLarge bool
	closed   bool
}

func newTracker(grace time.Duration, stuck func(), answered *atomic.Int64) *tracker {
	return &tracker{grace: grace, stuck: stuck, answeredN: answered, inflight: map[string]bool{}, timers: map[string]*time.Timer{}}
}

func idKey(v any) string { return fmt.Sprint(v) }

func (t *tracker) sent(id jsonrpc.ID) {
	t.mu.Lock()
	t.inflight[idKey(id.Raw())] = true
	t.mu.Unlock()
}

func (t *tracker) answered(id jsonrpc.ID) {
	k := idKey(id.Raw())
	t.mu.Lock()
	delete(t.inflight, k)
	if tm := t.timers[k]; tm != nil {
		if tm.Stop() {
			t.answeredN.Add(1)
		}
		delete(t.timers, k)
	}
	t.mu.Unlock()
}

func (t *tracker) cancelled(raw json.RawMessage) {
	var p struct {
		RequestID json.Number `json:"requestId"`
	}
	if json.Unmarshal(raw, &p) != nil {
		var q struct {
			RequestID string `json:"requestId"`
		}
		if json.Unmarshal(raw, &q) != nil {
			return
		}
		p.RequestID = json.Number(q.RequestID)
	}
	k := string(p.RequestID)
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.inflight[k] || t.timers[k] != nil || t.closed {
		return
	}
	t.timers[k] = time.AfterFunc(t.grace, func() {
		t.mu.Lock()
		still := t.inflight[k] && !t.closed
		delete(t.timers, k)
		t.mu.Unlock()
		if still {
			t.stuck()
		}
	})
}

func (t *tracker) close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	for k, tm := range t.timers {
		tm.Stop()
		delete(t.timers, k)
	}
}

func (t *tracker) wasTooLarge() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.tooLarge
}

// trackingTransport wraps a stdio transport with a tracker.
type trackingTransport struct {
	inner mcp.Transport
	t     *tracker
}

func (tt *trackingTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := tt.inner.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &trackingConn{Connection: c, t: tt.t}, nil
}

type trackingConn struct {
	mcp.Connection
	t *tracker
}

func (c *trackingConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	m, err := c.Connection.Read(ctx)
	if err != nil {
		// The SDK's frame bound has no exported error value.
		if strings.Contains(err.Error(), "exceeded the configured maximum line length") {
			c.t.mu.Lock()
			c.t.tooLarge = true
			c.t.mu.Unlock()
		}
		return m, err
	}
	if r, ok := m.(*jsonrpc.Response); ok {
		c.t.answered(r.ID)
	}
	return m, nil
}

func (c *trackingConn) Write(ctx context.Context, m jsonrpc.Message) error {
	if r, ok := m.(*jsonrpc.Request); ok {
		switch {
		case r.IsCall():
			c.t.sent(r.ID)
		case r.Method == "notifications/cancelled":
			c.t.cancelled(r.Params)
		}
	}
	return c.Connection.Write(ctx, m)
}
