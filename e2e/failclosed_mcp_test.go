package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestFailClosedMCPIdleConnections: 20,000 unauthenticated keep-alive
// connections, each of which sent a request and got its 401 (or was
// closed as accepted, past its address's bound), from 20 loopback
// addresses 127.0.0.2-21, beside an authenticated client on 127.0.0.1:
// the authenticated request is answered, and every idle connection is
// closed by the server.
func TestFailClosedMCPIdleConnections(t *testing.T) {
	if testing.Short() {
		t.Skip("20,000 connections")
	}
	const conns, addrs = 20000, 20
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	// The test holds only the connections the server keeps (a few per
	// address past the bound), but as many as it can when it keeps all.
	if lim.Cur < lim.Max {
		lim.Cur = lim.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			t.Fatal(err)
		}
	}
	const token = "failclosed-mcp-token-7d41"
	p := startProcEnv(t, "coordinator mcp http", []string{"TOOLFLEET_MCP_TOKENS=" + token}, bins.coordinator,
		"mcp", "--transport", "http", "--http-addr", "127.0.0.1:0", "--log-level", "info", "--http-idle-timeout", "2s")
	var addr string
	p.waitLog(60*time.Second, "serving MCP over streamable HTTP")
	for _, l := range p.logLines(func(m map[string]any) bool { return m["message"] == "serving MCP over streamable HTTP" }) {
		addr, _ = l["addr"].(string)
	}
	list := `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}`
	request := func(auth string) []byte {
		var b bytes.Buffer
		fmt.Fprintf(&b, "POST /mcp HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n", addr)
		if auth != "" {
			fmt.Fprintf(&b, "Authorization: Bearer %s\r\n", auth)
		}
		fmt.Fprintf(&b, "Content-Length: %d\r\n\r\n%s", len(list), list)
		return b.Bytes()
	}
	unauth := request("")

	// The idle connections: each sends a request without a token and
	// reads its answer, then stays open.
	held := make([]net.Conn, conns)
	var got401, closedAtOnce, dialFailed atomic.Int64
	var wg sync.WaitGroup
	work := make(chan int)
	for range 128 {
		wg.Go(func() {
			for i := range work {
				d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(2+i%addrs))}, Timeout: 30 * time.Second}
				c, err := d.Dial("tcp", addr)
				if err != nil {
					dialFailed.Add(1)
					continue
				}
				c.SetDeadline(time.Now().Add(30 * time.Second))
				if _, err := c.Write(unauth); err != nil {
					closedAtOnce.Add(1)
					c.Close()
					continue
				}
				resp, err := http.ReadResponse(bufio.NewReader(c), nil)
				if err != nil {
					closedAtOnce.Add(1)
					c.Close()
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusUnauthorized {
					got401.Add(1)
				}
				c.SetDeadline(time.Time{})
				held[i] = c
			}
		})
	}
	for i := range conns {
		work <- i
	}
	close(work)
	wg.Wait()
	t.Logf("%d connections got a 401 and were held open, %d were closed as accepted, %d dials failed", got401.Load(), closedAtOnce.Load(), dialFailed.Load())
	if got401.Load() == 0 {
		t.Fatal("no connection got a 401")
	}

	// The authenticated client, beside them.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("the authenticated client could not connect: %v", err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.Write(request(token)); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("the authenticated request got no answer: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !bytes.Contains(body, []byte(`"echo"`)) {
		t.Fatalf("authenticated tools/list: %d %.300s", resp.StatusCode, body)
	}

	// Every held connection is closed by the server: a read returns
	// EOF (or a reset), not the test's own deadline.
	var open atomic.Int64
	idx := make(chan int)
	var rg sync.WaitGroup
	for range 128 {
		rg.Go(func() {
			buf := make([]byte, 1)
			for i := range idx {
				hc := held[i]
				if hc == nil {
					continue
				}
				hc.SetReadDeadline(time.Now().Add(60 * time.Second))
				if _, err := hc.Read(buf); err != nil {
					if ne, ok := err.(net.Error); ok && ne.Timeout() {
						open.Add(1)
					}
				}
				hc.Close()
			}
		})
	}
	for i := range conns {
		idx <- i
	}
	close(idx)
	rg.Wait()
	if n := open.Load(); n > 0 {
		t.Fatalf("%d idle connections were still open a minute later", n)
	}
}
