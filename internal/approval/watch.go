package approval

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natsbus/stores"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// watchBuffer bounds the messages a watch holds before its caller reads
// them.
const watchBuffer = 256

// maxRemembered bounds the requests a watch remembers having delivered
// (and the agents of runs it has looked up) before it forgets the expired
// ones.
const maxRemembered = 4096

// WatchFilter selects the requests [Watch] delivers. Its zero value
// selects every request.
type WatchFilter struct {
	// Run selects the requests of one run.
	Run protocol.RunID
	// Tool selects the requests of one tool's calls.
	Tool protocol.ToolName
	// Agent selects the requests of runs submitted to one agent, as the
	// run's journal names it.
	Agent string
	// Since starts the watch with the requests stored at or after it; the
	// zero time, with every request the approvals stream holds.
	Since time.Time
}

// Watch calls found with each open request f selects: first those open
// when it starts, in the order they were stored, then each one as it is
// stored, until found returns false (Watch returns nil) or ctx ends (its
// error is returned). A request is open until its outcome note is stored
// or its deadline passes; one stored again (a resumed run asking again)
// is delivered once. It reads the approvals stream's requests and outcome
// notes through one consumer, once — never a decision, so a flood of them
// costs it nothing — and a run's journal once, for an Agent filter.
func Watch(ctx context.Context, js natsbus.JetStream, subjects protocol.Subjects, f WatchFilter, found func(PendingRequest) bool) error {
	if f.Run != "" && !f.Run.Valid() {
		return fmt.Errorf("approval: run id %q must match %s", f.Run, protocol.TokenPattern)
	}
	requests, outcomes := subjects.ApprovalRequests(), subjects.ApprovalOutcomes()
	if f.Run != "" {
		requests = strings.TrimSuffix(requests, ">") + string(f.Run) + ".*"
		outcomes = strings.TrimSuffix(outcomes, ">") + string(f.Run) + ".*"
	}
	w, err := natsbus.WatchStream(ctx, js, subjects.ApprovalsStream(), []string{requests, outcomes}, f.Since, watchBuffer)
	if err != nil {
		return err
	}
	defer w.Stop()
	s := &watchState{js: js, subjects: subjects, f: f, delivered: map[string]time.Time{}, agents: map[protocol.RunID]string{}}
	catchingUp := w.Pending() > 0
	backlog := map[string]PendingRequest{}
	var order []string
	for {
		m, err := w.Next(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("approval: watching requests: %w", err)
		}
		if !m.Reflected {
			kind, run, key, ok := splitApprovalSubject(subjects, m.Subject)
			id := ledgerID(run, key)
			switch {
			case !ok:
			case kind == "request":
				req, why := decodeRequest(run, key, m.Data)
				switch {
				case why != "":
				case catchingUp:
					if _, seen := backlog[id]; !seen {
						order = append(order, id)
					}
					backlog[id] = PendingRequest{ApprovalRequest: req, Sequence: m.Seq}
				default:
					if !s.deliver(ctx, id, PendingRequest{ApprovalRequest: req, Sequence: m.Seq}, found) {
						return nil
					}
				}
			case kind == "outcome":
				if n, err := protocol.DecodeApprovalNote(m.Data); err == nil && n.RunID == run && n.CallKey == key {
					delete(backlog, id)
				}
			}
		}
		if catchingUp && m.Pending == 0 {
			catchingUp = false
			for _, id := range order {
				if p, open := backlog[id]; open && !s.deliver(ctx, id, p, found) {
					return nil
				}
			}
			backlog, order = nil, nil
		}
	}
}

// watchState is what a watch remembers.
type watchState struct {
	js        natsbus.JetStream
	subjects  protocol.Subjects
	f         WatchFilter
	delivered map[string]time.Time // request id -> its deadline
	agents    map[protocol.RunID]string
}

// deliver passes p to found if it is open, selected and not delivered
// before, and reports whether the watch goes on.
func (s *watchState) deliver(ctx context.Context, id string, p PendingRequest, found func(PendingRequest) bool) bool {
	now := time.Now()
	if _, done := s.delivered[id]; done || !now.Before(p.Deadline) {
		return true
	}
	if s.f.Tool != "" && p.Tool != s.f.Tool {
		return true
	}
	if s.f.Agent != "" && s.agent(ctx, p.RunID) != s.f.Agent {
		return true
	}
	if len(s.delivered) >= maxRemembered {
		for id, deadline := range s.delivered {
			if !now.Before(deadline) {
				delete(s.delivered, id)
			}
		}
	}
	s.delivered[id] = p.Deadline
	return found(p)
}

// agent returns the agent run was submitted to, as its journal's request
// entry names it, or "" when it names none or cannot be read.
func (s *watchState) agent(ctx context.Context, run protocol.RunID) string {
	if a, ok := s.agents[run]; ok {
		return a
	}
	if len(s.agents) >= maxRemembered {
		clear(s.agents)
	}
	recs, err := stores.ReadJournal(ctx, s.js, s.subjects, run)
	if err != nil {
		// Not remembered: asked again with the run's next request.
		return ""
	}
	agent := ""
	for _, r := range recs {
		if r.Entry.Kind != stores.EntryRequest {
			continue
		}
		var req struct {
			Agent string `json:"agent"`
		}
		if json.Unmarshal(r.Entry.Data, &req) == nil {
			agent = req.Agent
		}
		break
	}
	s.agents[run] = agent
	return agent
}
