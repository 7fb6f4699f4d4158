package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natsbus/stores"
	"github.com/toolfleet/toolfleet/pkg/client"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// Approval is one pending approval request as GET /v1/approvals lists
// it: the exact arguments the call runs with if approved (the model's,
// untrusted), the digest a decision is bound to, the run and its agent,
// and the deadline.
type Approval struct {
	RunID     protocol.RunID    `json:"run_id"`
	CallKey   protocol.CallKey  `json:"call_key"`
	CallID    protocol.CallID   `json:"call_id,omitempty"`
	Round     int               `json:"round"`
	Tool      protocol.ToolName `json:"tool"`
	Arguments json.RawMessage   `json:"arguments"`
	Digest    string            `json:"digest"`
	Agent     string            `json:"agent,omitempty"`
	Deadline  time.Time         `json:"deadline"`
	Sequence  uint64            `json:"sequence"`
}

// DecisionRequest is the body of POST /v1/approvals/{run}/{key}.
type DecisionRequest struct {
	// Decision is "approve" or "deny".
	Decision string `json:"decision"`
	// Reason says why; required to deny. It reaches the model.
	Reason string `json:"reason,omitempty"`
}

// DecisionResult is the answer of POST /v1/approvals/{run}/{key}: the
// outcome the run's coordinator recorded, and who decided (the session's
// NATS user).
type DecisionResult struct {
	RunID    protocol.RunID   `json:"run_id"`
	CallKey  protocol.CallKey `json:"call_key"`
	Outcome  string           `json:"outcome"`
	Approver string           `json:"approver"`
}

func (s *Server) listApprovals(ctx context.Context, w http.ResponseWriter, r *http.Request, ss *session) {
	reqs, err := ss.cl.Approvals(ctx, 0)
	if err != nil {
		s.fail(w, r, fromNATS(ctx, err), err)
		return
	}
	agents := map[protocol.RunID]string{}
	out := make([]Approval, 0, len(reqs))
	for _, q := range reqs {
		out = append(out, s.approval(ctx, ss, q, agents))
	}
	writeJSON(w, http.StatusOK, map[string]any{"approvals": out})
}

// approval is q as the API shows it, with its run's agent (read from the
// run's journal once a run: agents caches it).
func (s *Server) approval(ctx context.Context, ss *session, q client.ApprovalRequest, agents map[protocol.RunID]string) Approval {
	agent, ok := agents[q.RunID]
	if !ok {
		if recs, err := stores.ReadJournalFrom(ctx, ss.rd, s.subjects, q.RunID, 0); err == nil && len(recs) > 0 {
			agent = summary(q.RunID, recs).Agent
		}
		agents[q.RunID] = agent
	}
	return Approval{RunID: q.RunID, CallKey: q.CallKey, CallID: q.CallID, Round: q.Round, Tool: q.Tool,
		Arguments: q.Arguments, Digest: q.Digest, Agent: agent, Deadline: q.Deadline, Sequence: q.Sequence}
}

// EventApproval is the kind of the events of GET /v1/approvals/events.
const EventApproval = "approval"

// maxAgentsCached bounds the runs whose agent an approvals stream keeps.
const maxAgentsCached = 1024

// approvalEvents streams the open approval requests as server-sent
// events (kind "approval", data an Approval, id its sequence in the
// approvals stream): those open when it starts, then each as it is
// stored. A viewer that reconnects with Last-Event-ID gets those stored
// after it.
func (s *Server) approvalEvents(ctx context.Context, w http.ResponseWriter, r *http.Request, ss *session) {
	var after uint64
	if v := r.Header.Get("Last-Event-ID"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			s.fail(w, r, badField("Last-Event-ID", "Last-Event-ID must be an event id this stream sent"), nil)
			return
		}
		after = n
	}
	release, e := s.takeStream(w, ss)
	if e != nil {
		s.fail(w, r, e, nil)
		return
	}
	defer release()
	// Whether the user reads the approvals at all, before the stream is
	// answered 200: a watch that may not read them waits.
	probe, endProbe := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	_, err := ss.cl.Approvals(probe, time.Nanosecond)
	endProbe()
	if err != nil {
		s.fail(w, r, fromNATS(ctx, err), err)
		return
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	out := make(chan []byte, s.cfg.StreamBuffer)
	done := make(chan struct{})
	go func() {
		defer close(done)
		agents := map[protocol.RunID]string{}
		send := func(q client.ApprovalRequest) bool {
			if q.Sequence <= after {
				return true
			}
			if len(agents) >= maxAgentsCached {
				clear(agents)
			}
			select {
			case out <- sse(EventApproval, strconv.FormatUint(q.Sequence, 10), s.approval(ctx, ss, q, agents)):
				return true
			default:
				cancel(errBehind)
				return false
			}
		}
		s.followApprovals(ctx, ss, send)
	}()
	defer func() { cancel(nil); <-done }()
	s.writeEvents(ctx, w, out, done)
}

func (s *Server) decide(ctx context.Context, w http.ResponseWriter, r *http.Request, ss *session) {
	run, e := runID(r, "run")
	if e != nil {
		s.fail(w, r, e, nil)
		return
	}
	key := protocol.CallKey(r.PathValue("key"))
	if !protocol.ValidToken(string(key)) {
		s.fail(w, r, badField("key", "the call key must match "+protocol.TokenPattern), nil)
		return
	}
	var in DecisionRequest
	if e := decodeBody(w, r, 16<<10, &in); e != nil {
		s.fail(w, r, e, nil)
		return
	}
	if in.Decision != "approve" && in.Decision != "deny" {
		s.fail(w, r, badField("decision", `decision must be "approve" or "deny"`), nil)
		return
	}
	if e := checkText("reason", in.Reason, maxReasonRunes, in.Decision == "deny"); e != nil {
		s.fail(w, r, e, nil)
		return
	}
	req := client.ApprovalRequest{RunID: run, CallKey: key}
	d := client.Decision{Approver: ss.user, Reason: in.Reason}
	var outcome string
	var err error
	if in.Decision == "approve" {
		outcome, err = ss.cl.Approve(ctx, req, d)
	} else {
		outcome, err = ss.cl.Deny(ctx, req, d)
	}
	switch {
	case errors.Is(err, client.ErrNoApprovalRequest):
		s.fail(w, r, errorf(http.StatusNotFound, CodeNotFound, "no approval request for this call"), nil)
		return
	case errors.Is(err, client.ErrApprovalExpired):
		s.fail(w, r, errorf(http.StatusConflict, CodeConflict, "the request expired; the call did not run"), nil)
		return
	case errors.Is(err, client.ErrApprovalSettled):
		s.fail(w, r, errorf(http.StatusConflict, CodeConflict, "the request was already decided"), nil)
		return
	case errors.Is(err, client.ErrNoOutcome):
		writeJSON(w, http.StatusAccepted, DecisionResult{RunID: run, CallKey: key, Outcome: "pending", Approver: ss.user})
		return
	case err != nil:
		s.fail(w, r, fromNATS(ctx, err), err)
		return
	}
	writeJSON(w, http.StatusOK, DecisionResult{RunID: run, CallKey: key, Outcome: outcome, Approver: ss.user})
}

// Bounds of GET /v1/approvals/decisions.
const (
	defaultDecisions = 100
	maxDecisionsScan = 10_000
)

// Decided is one settled approval request of GET
// /v1/approvals/decisions: what the run's coordinator recorded in the
// approvals stream (the audit log) — approved, denied, expired or
// cancelled, by whom and why — and its place there.
type Decided struct {
	protocol.ApprovalNote
	Sequence uint64 `json:"sequence"`
}

// followApprovals sends the approval requests open when it starts, then
// each request stored after that is still open when read, polling the
// approvals stream every PollInterval with direct gets (no consumer),
// until ctx ends or send refuses.
func (s *Server) followApprovals(ctx context.Context, ss *session, send func(client.ApprovalRequest) bool) {
	// Where the requests stored after the listing start: read before it.
	st, err := ss.js.Stream(ctx, s.subjects.ApprovalsStream())
	if err != nil {
		return
	}
	from := st.CachedInfo().State.LastSeq + 1
	open, err := ss.cl.Approvals(ctx, 0)
	if err != nil {
		return
	}
	seen := map[string]bool{}
	for _, q := range open {
		seen[string(q.RunID)+"."+string(q.CallKey)] = true
		if !send(q) {
			return
		}
	}
	tick := time.NewTicker(s.cfg.PollInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		var stored []client.ApprovalRequest
		_, err := ss.rd.All(ctx, s.subjects.ApprovalsStream(), s.subjects.ApprovalRequests(), from, maxApprovalsPoll, func(m natsbus.DirectMsg) bool {
			from = m.Seq + 1
			if q, ok := s.openRequest(m); ok && !seen[string(q.RunID)+"."+string(q.CallKey)] {
				seen[string(q.RunID)+"."+string(q.CallKey)] = true
				stored = append(stored, q)
			}
			return true
		})
		if err != nil {
			return
		}
		settled, err := s.settled(ctx, ss, stored)
		if err != nil {
			return
		}
		for _, q := range stored {
			if !settled[string(q.RunID)+"."+string(q.CallKey)] && !send(q) {
				return
			}
		}
		if len(seen) > maxSeenApprovals {
			clear(seen) // a request stored again after this is sent again
		}
	}
}

// Bounds of an approvals stream's polling.
const (
	// maxApprovalsPoll bounds the messages one poll reads.
	maxApprovalsPoll = 4096
	// maxSeenApprovals bounds the requests a stream remembers it sent.
	maxSeenApprovals = 100_000
)

// openRequest decodes m, a message stored on an approval request's
// subject, as a request of the call its subject names, whose digest is
// its arguments' and whose deadline is ahead.
func (s *Server) openRequest(m natsbus.DirectMsg) (client.ApprovalRequest, bool) {
	req, err := protocol.DecodeApprovalRequest(m.Data, protocol.DefaultMaxMessageBytes)
	if err != nil || !s.cfg.Now().Before(req.Deadline) {
		return client.ApprovalRequest{}, false
	}
	if subj, err := s.subjects.ApprovalRequest(req.RunID, req.CallKey); err != nil || subj != m.Subject {
		return client.ApprovalRequest{}, false
	}
	if digest, err := protocol.Digest(req.RunID, req.CallKey, req.Tool, req.Arguments); err != nil || digest != req.Digest {
		return client.ApprovalRequest{}, false
	}
	return client.ApprovalRequest{RunID: req.RunID, CallKey: req.CallKey, CallID: req.CallID, Round: req.Round, Tool: req.Tool,
		Arguments: req.Arguments, Digest: req.Digest, Deadline: req.Deadline, Sequence: m.Seq}, true
}

// settled reports which of reqs have an outcome recorded (by run.key),
// with one direct get of their outcome subjects' last messages.
func (s *Server) settled(ctx context.Context, ss *session, reqs []client.ApprovalRequest) (map[string]bool, error) {
	out := map[string]bool{}
	for len(reqs) > 0 {
		chunk := reqs[:min(len(reqs), 512)]
		reqs = reqs[len(chunk):]
		var subjects []string
		for _, q := range chunk {
			subj, err := s.subjects.ApprovalOutcome(q.RunID, q.CallKey)
			if err != nil {
				return nil, err
			}
			subjects = append(subjects, subj)
		}
		msgs, err := ss.rd.LastOf(ctx, s.subjects.ApprovalsStream(), subjects...)
		if err != nil {
			return nil, err
		}
		for _, m := range msgs {
			if n, err := protocol.DecodeApprovalNote(m.Data); err == nil && !m.Reflected {
				if want, _ := s.subjects.ApprovalOutcome(n.RunID, n.CallKey); want == m.Subject {
					out[string(n.RunID)+"."+string(n.CallKey)] = true
				}
			}
		}
	}
	return out, nil
}

// decisions lists the settled approval requests stored since the
// query's since (default 24h), oldest first, the newest limit of them.
func (s *Server) decisions(ctx context.Context, w http.ResponseWriter, r *http.Request, ss *session) {
	q := r.URL.Query()
	for k := range q {
		if k != "since" && k != "limit" {
			s.fail(w, r, badField(k, "unknown query parameter "+strconv.Quote(k)), nil)
			return
		}
	}
	since := s.cfg.Now().Add(-24 * time.Hour)
	if v := q.Get("since"); v != "" {
		t, e := parseSince(v, s.cfg.Now())
		if e != nil {
			s.fail(w, r, e, nil)
			return
		}
		since = t
	}
	limit := defaultDecisions
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxListLimit {
			s.fail(w, r, badField("limit", "limit must be 1.."+strconv.Itoa(maxListLimit)), nil)
			return
		}
		limit = n
	}
	out := []Decided{}
	_, err := ss.rd.AllSince(ctx, s.subjects.ApprovalsStream(), s.subjects.ApprovalOutcomes(), since, maxDecisionsScan, func(m natsbus.DirectMsg) bool {
		if note, err := protocol.DecodeApprovalNote(m.Data); err == nil {
			out = append(out, Decided{ApprovalNote: note, Sequence: m.Seq})
		}
		return true
	})
	if err != nil {
		s.fail(w, r, fromNATS(ctx, err), err)
		return
	}
	if len(out) > limit {
		out = out[len(out)-limit:]
	}
	writeJSON(w, http.StatusOK, map[string]any{"decisions": out})
}
