package mcpserve

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"net/http"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// requestHeader carries the id tieRequest gives each HTTP request to the
// tool handler (the SDK hands handlers the request's headers, not its
// context). Whatever a client sends in it is replaced.
const requestHeader = "X-Toolfleet-Request"

// tieRequest lets a call find the context of the HTTP request that carries
// it (requestContext), so that a client that disconnects cancels its call
// whatever protocol version it speaks: the SDK ties the two only from
// protocol 2026-07-28 on.
func (s *Server) tieRequest(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b := make([]byte, 16)
		rand.Read(b)
		id := hex.EncodeToString(b)
		r.Header.Set(requestHeader, id)
		s.requests.Store(id, r.Context())
		defer s.requests.Delete(id)
		next.ServeHTTP(w, r)
	})
}

// requestContext returns ctx, also cancelled when the HTTP request that
// carries req ends (its client disconnected), and the func that releases
// it. Without an HTTP request (stdio) it is ctx itself.
func (s *Server) requestContext(ctx context.Context, req *mcp.CallToolRequest) (context.Context, context.CancelFunc) {
	if req == nil || req.Extra == nil || req.Extra.Header == nil {
		return ctx, func() {}
	}
	v, ok := s.requests.Load(req.Extra.Header.Get(requestHeader))
	if !ok {
		return ctx, func() {}
	}
	rctx := v.(context.Context)
	ctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(rctx, func() { cancel(errClientGone) })
	return ctx, func() { stop(); cancel(nil) }
}

// errClientGone is the cause of a call cancelled because its HTTP client
// disconnected.
var errClientGone = &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "the client disconnected"}

// checkOrigin refuses, with 403, a request whose Origin header is present
// and neither one of allowed nor an origin of the server itself (see
// ownOrigins; addr is its listen address). The MCP specification: servers
// must validate Origin, against DNS rebinding and cross-site requests from
// web pages. A request without an Origin header is not from a browser and
// passes.
func checkOrigin(allowed []string, addr string, next http.Handler) http.Handler {
	ok := map[string]bool{}
	for _, o := range append(ownOrigins(addr), allowed...) {
		ok[normOrigin(o)] = true
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if origins := r.Header.Values("Origin"); len(origins) > 0 {
			if len(origins) > 1 || !ok[normOrigin(origins[0])] {
				http.Error(w, "Forbidden: origin not allowed", http.StatusForbidden)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// ownOrigins are the origins of a server listening on addr (host:port):
// http and https on the bound address, and on a loopback or unspecified
// address the names of this host's loopback too (localhost, 127.0.0.1,
// [::1]) at that port. Empty for an address without a port.
func ownOrigins(addr string) []string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || port == "" || port == "0" {
		return nil
	}
	hosts := []string{host}
	ip := net.ParseIP(host)
	if host == "localhost" || (ip != nil && (ip.IsLoopback() || ip.IsUnspecified())) {
		hosts = append(hosts, "localhost", "127.0.0.1", "::1")
	}
	var out []string
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil && ip.IsUnspecified() {
			continue // no browser is on 0.0.0.0
		}
		hp := net.JoinHostPort(h, port)
		out = append(out, "http://"+hp, "https://"+hp)
	}
	return out
}

// normOrigin is an origin in the form compared: lower case, no trailing
// slash.
func normOrigin(o string) string {
	return strings.TrimSuffix(strings.ToLower(strings.TrimSpace(o)), "/")
}
