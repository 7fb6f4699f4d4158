package mcptool

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolfleet/toolfleet/pkg/harness"
)

// progressSinks routes an MCP server's notifications/progress to the
// harness sink of the call whose progress token they carry: the server's
// progress becomes the call's ([harness.ReportProgress]), redacted like its
// output. Tokens of calls that ended, or that nobody follows, are dropped.
type progressSinks struct {
	m sync.Map // progress token (string) → harness.ProgressFunc
}

// follow routes the progress of token to ctx's sink until the returned
// function is called.
func (p *progressSinks) follow(ctx context.Context, token string) func() {
	f := harness.ProgressFrom(ctx)
	if f == nil {
		return func() {}
	}
	p.m.Store(token, f)
	return func() { p.m.Delete(token) }
}

// onProgress passes one notification on. It never blocks: the harness
// sink drops what it cannot pass on.
func (s *Server) onProgress(req *mcp.ProgressNotificationClientRequest) {
	if req == nil || req.Params == nil {
		return
	}
	token, ok := req.Params.ProgressToken.(string)
	if !ok {
		return
	}
	v, ok := s.sinks.m.Load(token)
	if !ok {
		return
	}
	v.(harness.ProgressFunc)(progressText(s.secrets, req.Params))
}

// progressText renders a notification as one report: its message, then
// "progress/total" (or the progress alone), redacted.
func progressText(r *redactor, p *mcp.ProgressNotificationParams) string {
	n := strconv.FormatFloat(p.Progress, 'g', 6, 64)
	if p.Total > 0 {
		n += "/" + strconv.FormatFloat(p.Total, 'g', 6, 64)
	}
	// Redacted whole, then cut: a cut never leaves part of a secret.
	msg := strings.TrimSpace(r.redact(p.Message))
	if msg == "" {
		return n
	}
	return harness.ClipProgress(fmt.Sprintf("%s (%s)", msg, n))
}
