package httpapi

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/toolfleet/toolfleet/internal/discovery"
	"github.com/toolfleet/toolfleet/internal/natsbus/admission"
	"github.com/toolfleet/toolfleet/internal/natsbus/stores"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// Tool is one tool of GET /v1/tools, as the catalog and its live workers
// describe it (NATS micro discovery): its flags and timeout, the workers
// serving it with their schema digests (none when no live worker answers,
// and none for a user whose discovery reaches no worker: the viewer), its
// queue (calls waiting for a worker, calls a worker holds), whether it is
// paused and its fleet-wide rate limit.
type Tool struct {
	Name             protocol.ToolName   `json:"name"`
	Workers          []ToolWorker        `json:"workers"`
	TimeoutMS        int64               `json:"timeout_ms,omitempty"`
	Idempotent       bool                `json:"idempotent"`
	RequiresApproval bool                `json:"requires_approval"`
	Waiting          uint64              `json:"waiting"`
	InFlight         int                 `json:"in_flight"`
	Paused           bool                `json:"paused"`
	PausedUntil      time.Time           `json:"paused_until,omitzero"`
	Limit            *protocol.RateLimit `json:"limit,omitempty"`
}

// ToolWorker is one live worker serving a tool, with the digest of the
// schema it validates the tool's arguments against.
type ToolWorker struct {
	Name         string `json:"name"`
	SchemaDigest string `json:"schema_digest"`
}

// PauseRequest is the body of POST /v1/tools/{tool}/pause.
type PauseRequest struct {
	// Reason says why; it is kept in the audit log.
	Reason string `json:"reason"`
	// Until ends the pause (RFC 3339). Default: until resumed.
	Until *time.Time `json:"until,omitempty"`
}

// ResumeRequest is the body of POST /v1/tools/{tool}/resume.
type ResumeRequest struct {
	Reason string `json:"reason"`
}

// LimitRequest is the body of POST /v1/tools/{tool}/limit: at most Rate
// calls a second, fleet-wide (0 lifts every limit), Burst at once.
type LimitRequest struct {
	Rate   float64 `json:"rate"`
	Burst  int     `json:"burst,omitempty"`
	Reason string  `json:"reason"`
}

// maxHistory bounds GET /v1/tools/{tool}/history.
const maxHistory = 1000

func toolName(r *http.Request) (protocol.ToolName, *apiError) {
	t := protocol.ToolName(r.PathValue("tool"))
	if !t.Valid() {
		return "", badField("tool", "the tool name must match ^[A-Za-z0-9_-]{1,64}$")
	}
	return t, nil
}

func (s *Server) listTools(ctx context.Context, w http.ResponseWriter, r *http.Request, ss *session) {
	found, err := discovery.Discover(ctx, ss.nc, s.subjects, discovery.DiscoverConfig{})
	if err != nil {
		s.fail(w, r, fromNATS(ctx, err), err)
		return
	}
	byName := map[protocol.ToolName]*Tool{}
	// The catalog's tools too, those no live worker serves (and every
	// tool, for a user whose discovery requests nothing answers: the
	// viewer's account asks none of the fleet's workers).
	specs, err := stores.ReadCatalog(ctx, ss.js, s.subjects)
	if err != nil {
		s.fail(w, r, fromNATS(ctx, err), err)
		return
	}
	for _, t := range specs {
		byName[t.Name] = &Tool{Name: t.Name, Workers: []ToolWorker{}, TimeoutMS: t.TimeoutMS, Idempotent: t.Idempotent, RequiresApproval: t.RequiresApproval}
	}
	for _, wk := range found {
		for _, t := range wk.Tools {
			tool := byName[t.Name]
			if tool == nil {
				tool = &Tool{Name: t.Name, TimeoutMS: t.Timeout.Milliseconds(), Idempotent: t.Idempotent, RequiresApproval: t.RequiresApproval}
				byName[t.Name] = tool
			}
			tool.Workers = append(tool.Workers, ToolWorker{Name: wk.Name, SchemaDigest: t.SchemaDigest})
		}
	}
	tt := admission.NewToolTraffic(ss.js, s.subjects)
	out := make([]Tool, 0, len(byName))
	for _, t := range byName {
		slices.SortFunc(t.Workers, func(a, b ToolWorker) int { return strings.Compare(a.Name, b.Name) })
		if q, err := tt.Queue(ctx, t.Name); err == nil {
			t.Waiting, t.InFlight = q.Waiting, q.InFlight
		}
		if p, err := tt.PauseState(ctx, t.Name); err == nil {
			t.Paused, t.PausedUntil = p.Paused, p.Until
		}
		if lim, set, err := tt.Limit(ctx, t.Name); err == nil && set {
			t.Limit = &lim
		}
		out = append(out, *t)
	}
	slices.SortFunc(out, func(a, b Tool) int { return strings.Compare(string(a.Name), string(b.Name)) })
	writeJSON(w, http.StatusOK, map[string]any{"tools": out})
}

func (s *Server) pauseTool(ctx context.Context, w http.ResponseWriter, r *http.Request, ss *session) {
	tool, e := toolName(r)
	if e != nil {
		s.fail(w, r, e, nil)
		return
	}
	var in PauseRequest
	if e := decodeBody(w, r, 16<<10, &in); e != nil {
		s.fail(w, r, e, nil)
		return
	}
	if e := checkText("reason", in.Reason, maxReasonRunes, true); e != nil {
		s.fail(w, r, e, nil)
		return
	}
	now := s.cfg.Now().UTC()
	until := now.Add(protocol.PauseForever)
	if in.Until != nil {
		if !in.Until.After(now) {
			s.fail(w, r, badField("until", "until is in the past"), nil)
			return
		}
		until = in.Until.UTC()
	}
	p, err := admission.NewToolTraffic(ss.js, s.subjects).Pause(ctx, protocol.TrafficNote{Tool: tool, Until: &until, By: ss.user, Reason: in.Reason, At: now})
	if err != nil {
		s.fail(w, r, fromNATS(ctx, err), err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"tool": tool, "paused": p.Paused, "paused_until": p.Until})
}

func (s *Server) resumeTool(ctx context.Context, w http.ResponseWriter, r *http.Request, ss *session) {
	tool, e := toolName(r)
	if e != nil {
		s.fail(w, r, e, nil)
		return
	}
	var in ResumeRequest
	if e := decodeBody(w, r, 16<<10, &in); e != nil {
		s.fail(w, r, e, nil)
		return
	}
	if e := checkText("reason", in.Reason, maxReasonRunes, true); e != nil {
		s.fail(w, r, e, nil)
		return
	}
	if err := admission.NewToolTraffic(ss.js, s.subjects).Resume(ctx, protocol.TrafficNote{Tool: tool, By: ss.user, Reason: in.Reason, At: s.cfg.Now().UTC()}); err != nil {
		s.fail(w, r, fromNATS(ctx, err), err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"tool": tool, "paused": false})
}

func (s *Server) limitTool(ctx context.Context, w http.ResponseWriter, r *http.Request, ss *session) {
	tool, e := toolName(r)
	if e != nil {
		s.fail(w, r, e, nil)
		return
	}
	var in LimitRequest
	if e := decodeBody(w, r, 16<<10, &in); e != nil {
		s.fail(w, r, e, nil)
		return
	}
	if e := checkText("reason", in.Reason, maxReasonRunes, true); e != nil {
		s.fail(w, r, e, nil)
		return
	}
	lim := protocol.RateLimit{Rate: in.Rate, Burst: in.Burst}
	if err := lim.Validate(); err != nil {
		s.fail(w, r, badField("rate", "rate must be >= 0 and burst >= 0"), nil)
		return
	}
	note := protocol.TrafficNote{Tool: tool, Rate: in.Rate, Burst: in.Burst, By: ss.user, Reason: in.Reason, At: s.cfg.Now().UTC()}
	if err := admission.NewToolTraffic(ss.js, s.subjects).SetLimit(ctx, note); err != nil {
		s.fail(w, r, fromNATS(ctx, err), err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"tool": tool, "limit": lim})
}

func (s *Server) toolHistory(ctx context.Context, w http.ResponseWriter, r *http.Request, ss *session) {
	tool, e := toolName(r)
	if e != nil {
		s.fail(w, r, e, nil)
		return
	}
	limit := 100
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxHistory {
			s.fail(w, r, badField("limit", "limit must be 1.."+strconv.Itoa(maxHistory)), nil)
			return
		}
		limit = n
	}
	recs, err := admission.NewToolTraffic(ss.js, s.subjects).History(ctx, tool, limit)
	if err != nil {
		s.fail(w, r, fromNATS(ctx, err), err)
		return
	}
	out := make([]protocol.TrafficNote, len(recs))
	for i, rec := range recs {
		out[i] = rec.Note
	}
	writeJSON(w, http.StatusOK, map[string]any{"history": out})
}
