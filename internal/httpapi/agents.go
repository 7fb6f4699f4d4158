package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/toolfleet/toolfleet/internal/natsbus/stores"
	"github.com/toolfleet/toolfleet/pkg/agent"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// Agent is one agent of GET /v1/agents/{name}: its definition as stored
// (docs/agents.md) and its revision.
type Agent struct {
	Name       string          `json:"name"`
	Revision   uint64          `json:"revision"`
	Definition json.RawMessage `json:"definition"`
}

func (s *Server) listAgents(ctx context.Context, w http.ResponseWriter, r *http.Request, ss *session) {
	names, err := stores.AgentNames(ctx, ss.rd, s.subjects)
	if err != nil {
		s.fail(w, r, fromNATS(ctx, err), err)
		return
	}
	if names == nil {
		names = []string{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"agents": names})
}

func (s *Server) getAgent(ctx context.Context, w http.ResponseWriter, r *http.Request, ss *session) {
	name := r.PathValue("name")
	if !protocol.ValidToken(name) {
		s.fail(w, r, badField("name", "the agent name must match "+protocol.TokenPattern), nil)
		return
	}
	data, rev, err := stores.ReadAgent(ctx, ss.rd, s.subjects, name)
	switch {
	case errors.Is(err, stores.ErrAgentNotFound):
		s.fail(w, r, errorf(http.StatusNotFound, CodeNotFound, "no agent "+name), nil)
		return
	case err != nil:
		s.fail(w, r, fromNATS(ctx, err), err)
		return
	}
	def, err := agent.Parse(data)
	if err != nil {
		s.fail(w, r, errorf(http.StatusInternalServerError, CodeInternal, "the stored definition does not parse"), err)
		return
	}
	out, err := json.Marshal(def)
	if err != nil {
		s.fail(w, r, errorf(http.StatusInternalServerError, CodeInternal, "internal error"), err)
		return
	}
	writeJSON(w, http.StatusOK, Agent{Name: name, Revision: rev, Definition: out})
}
