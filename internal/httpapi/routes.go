package httpapi

import (
	"context"
	"net/http"
	"time"
)

// route is one of the API's routes: its pattern (method and path), as
// the OpenAPI document names it, and its handler.
type route struct {
	method, path string
	// public routes need no session.
	public bool
	// stream routes are not bounded by the request timeout.
	stream bool
	handle func(ctx context.Context, w http.ResponseWriter, r *http.Request, ss *session)
}

// routes are the API's routes; the OpenAPI document (openapi.json) holds
// exactly these, which TestOpenAPIMatchesRoutes checks.
func (s *Server) table() []route {
	return []route{
		{method: "GET", path: "/v1/openapi.json", public: true, handle: s.openAPI},
		{method: "POST", path: "/v1/session", public: true, handle: s.login},
		{method: "GET", path: "/v1/session", handle: s.whoami},
		{method: "DELETE", path: "/v1/session", handle: s.logout},
		{method: "POST", path: "/v1/runs", handle: s.submit},
		{method: "GET", path: "/v1/runs", handle: s.listRuns},
		{method: "GET", path: "/v1/runs/{id}", handle: s.getRun},
		{method: "POST", path: "/v1/runs/{id}/cancel", handle: s.cancelRun},
		{method: "GET", path: "/v1/runs/{id}/events", stream: true, handle: s.events},
		{method: "GET", path: "/v1/approvals", handle: s.listApprovals},
		{method: "GET", path: "/v1/approvals/decisions", handle: s.decisions},
		{method: "GET", path: "/v1/approvals/events", stream: true, handle: s.approvalEvents},
		{method: "POST", path: "/v1/approvals/{run}/{key}", handle: s.decide},
		{method: "GET", path: "/v1/tools", handle: s.listTools},
		{method: "POST", path: "/v1/tools/{tool}/pause", handle: s.pauseTool},
		{method: "POST", path: "/v1/tools/{tool}/resume", handle: s.resumeTool},
		{method: "POST", path: "/v1/tools/{tool}/limit", handle: s.limitTool},
		{method: "GET", path: "/v1/tools/{tool}/history", handle: s.toolHistory},
		{method: "GET", path: "/v1/agents", handle: s.listAgents},
		{method: "GET", path: "/v1/agents/{name}", handle: s.getAgent},
	}
}

// register installs every route, each behind authentication (but the
// public ones), the session's request context and, but for streams, the
// request timeout; anything else is a JSON 404 or 405.
func (s *Server) register() {
	s.routes = s.table()
	for _, rt := range s.routes {
		s.mux.HandleFunc(rt.method+" "+rt.path, func(w http.ResponseWriter, r *http.Request) {
			if rt.public {
				_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(s.cfg.RequestTimeout))
				rt.handle(r.Context(), w, r, nil)
				return
			}
			if !rt.stream {
				// a body dripped in slowly holds nothing for long
				_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(s.cfg.RequestTimeout))
			}
			ss, e := s.authenticate(r)
			if e != nil {
				s.fail(w, r, e, nil)
				return
			}
			ctx, end := ss.begin(r.Context(), s.cfg.Now())
			defer end()
			if !rt.stream {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, s.cfg.RequestTimeout)
				defer cancel()
			}
			rt.handle(ctx, w, r, ss)
		})
	}
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.fail(w, r, errorf(http.StatusNotFound, CodeNotFound, "no such route; GET /v1/openapi.json lists them"), nil)
	})
}
