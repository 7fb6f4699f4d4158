package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/toolfleet/toolfleet/internal/natsbus/stores"
	"github.com/toolfleet/toolfleet/internal/runs"
	"github.com/toolfleet/toolfleet/pkg/client"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// IdempotencyKeyHeader names a submission's id: a POST /v1/runs retried
// with the same key never starts a second run.
const IdempotencyKeyHeader = "Idempotency-Key"

// Bounds of GET /v1/runs.
const (
	defaultListLimit = 100
	maxListLimit     = 1000
)

// SubmitRequest is the body of POST /v1/runs: the protocol's run request
// (what "nats req" sends on a submission subject) and the agent to run.
type SubmitRequest struct {
	protocol.RunRequest
	// Agent names the agent to run. Default: "default".
	Agent string `json:"agent,omitempty"`
}

// Submitted is the answer of POST /v1/runs: 201 for a new run, 200 when
// the key was submitted before.
type Submitted struct {
	RunID      protocol.RunID `json:"run_id"`
	Submission string         `json:"submission_id"`
	Agent      string         `json:"agent"`
	Duplicate  bool           `json:"duplicate"`
}

// RunSummary is one run as its journal has it, with the client and the
// agent it was submitted by and to.
type RunSummary struct {
	RunID            protocol.RunID         `json:"run_id"`
	Client           string                 `json:"client,omitempty"`
	Agent            string                 `json:"agent,omitempty"`
	Status           string                 `json:"status"`
	Termination      loop.TerminationReason `json:"termination,omitempty"`
	Owner            string                 `json:"owner,omitempty"`
	Owners           int                    `json:"owners"`
	Round            int                    `json:"round"`
	PendingCalls     []loop.JournaledCall   `json:"pending_calls,omitempty"`
	PendingApprovals []loop.JournaledCall   `json:"pending_approvals,omitempty"`
	ApprovalDeadline time.Time              `json:"approval_deadline,omitzero"`
	LastStep         string                 `json:"last_step"`
	StartedAt        time.Time              `json:"started_at,omitzero"`
	LastAt           time.Time              `json:"last_at"`
	Entries          int                    `json:"entries"`
	HasResult        bool                   `json:"has_result"`
	DryRun           bool                   `json:"dry_run,omitempty"`
}

// Run is the answer of GET /v1/runs/{id}: what the journal says (absent
// for a user who reads no journal: a client) and the stored result
// (absent until the run ends) — answer, termination, budget, every call
// with its outcome, observation, duration and worker, and the transcript
// (docs/result.schema.json).
type Run struct {
	RunID  protocol.RunID      `json:"run_id"`
	State  *RunSummary         `json:"state,omitempty"`
	Result *protocol.RunResult `json:"result,omitempty"`
	// Calls are the result's calls, each with what the model read for
	// it (client.LoopResult): absent until the result is stored.
	Calls []RunCall `json:"calls,omitempty"`
}

// RunCall is one call of a finished run: how it ended, what the model
// was told, how long it took and which worker ran it.
type RunCall struct {
	CallID      string           `json:"call_id"`
	CallKey     protocol.CallKey `json:"call_key,omitempty"`
	Round       int              `json:"round"`
	Tool        string           `json:"tool"`
	Outcome     protocol.Outcome `json:"outcome"`
	Observation string           `json:"observation"`
	DurationMS  int64            `json:"duration_ms"`
	Worker      string           `json:"worker,omitempty"`
	Attempt     int              `json:"attempt,omitempty"`
	ErrorType   string           `json:"error_type,omitempty"`
}

// runCalls are res's calls, nil when it holds none that decode.
func runCalls(res *protocol.RunResult) []RunCall {
	lr, err := client.LoopResult(res)
	if err != nil {
		return nil
	}
	var out []RunCall
	for _, c := range lr.CallResults() {
		out = append(out, RunCall{CallID: c.CallID, CallKey: c.CallKey, Round: c.Round, Tool: c.Tool, Outcome: c.Outcome,
			Observation: c.Observation, DurationMS: c.Duration.Milliseconds(), Worker: c.Worker, Attempt: c.Attempt, ErrorType: c.ErrorType})
	}
	return out
}

// CancelRequest is the body of POST /v1/runs/{id}/cancel.
type CancelRequest struct {
	Reason string `json:"reason"`
}

func (s *Server) submit(ctx context.Context, w http.ResponseWriter, r *http.Request, ss *session) {
	var in SubmitRequest
	if e := decodeBody(w, r, s.cfg.MaxBodyBytes, &in); e != nil {
		s.fail(w, r, e, nil)
		return
	}
	key := r.Header.Get(IdempotencyKeyHeader)
	if key != "" && !protocol.ValidToken(key) {
		s.fail(w, r, badField(IdempotencyKeyHeader, "the "+IdempotencyKeyHeader+" header must match "+protocol.TokenPattern), nil)
		return
	}
	if in.Agent != "" && !protocol.ValidToken(in.Agent) {
		s.fail(w, r, badField("agent", "agent must match "+protocol.TokenPattern), nil)
		return
	}
	in.RunRequest.V = protocol.Version
	if err := in.RunRequest.Validate(); err != nil {
		s.fail(w, r, protocolError(err), nil)
		return
	}
	data, err := protocol.Encode(&in.RunRequest)
	if err != nil {
		s.fail(w, r, protocolError(err), nil)
		return
	}
	run, err := ss.cl.SubmitRaw(ctx, in.Agent, key, data)
	if err != nil {
		s.fail(w, r, protocolOrNATS(ctx, err), err)
		return
	}
	status := http.StatusCreated
	if run.Duplicate {
		status = http.StatusOK
	}
	w.Header().Set("Location", "/v1/runs/"+string(run.ID))
	writeJSON(w, status, Submitted{RunID: run.ID, Submission: run.Submission, Agent: run.Agent, Duplicate: run.Duplicate})
}

// protocolError is the 400 of a request the protocol refuses, naming its
// field.
func protocolError(err error) *apiError {
	var pe *protocol.Error
	if errors.As(err, &pe) {
		if pe.Code == protocol.CodeTooLarge {
			return &apiError{Status: http.StatusRequestEntityTooLarge, Code: CodeTooLarge, Message: pe.Msg, Field: pe.Field}
		}
		return &apiError{Status: http.StatusBadRequest, Code: CodeBadRequest, Message: pe.Msg, Field: pe.Field}
	}
	return errorf(http.StatusBadRequest, CodeBadRequest, "the request is not valid")
}

func protocolOrNATS(ctx context.Context, err error) *apiError {
	var pe *protocol.Error
	if errors.As(err, &pe) {
		return protocolError(err)
	}
	return fromNATS(ctx, err)
}

// runID reads the path's run id.
func runID(r *http.Request, name string) (protocol.RunID, *apiError) {
	id := protocol.RunID(r.PathValue(name))
	if !id.Valid() {
		return "", badField(name, "the run id must match "+protocol.TokenPattern)
	}
	return id, nil
}

func (s *Server) getRun(ctx context.Context, w http.ResponseWriter, r *http.Request, ss *session) {
	id, e := runID(r, "id")
	if e != nil {
		s.fail(w, r, e, nil)
		return
	}
	out := Run{RunID: id}
	// A user who reads journals reads the run's journal and its client's
	// result (direct gets); a client, whose account has neither, only
	// its own result.
	recs, err := stores.ReadJournalFrom(ctx, ss.rd, s.subjects, id, 0)
	switch {
	case err == nil && len(recs) > 0:
		sum := summary(id, recs)
		out.State = &sum
		if out.Result, err = s.storedResult(ctx, ss, id, sum.Client); err != nil {
			s.fail(w, r, fromNATS(ctx, err), err)
			return
		}
	case err == nil:
		s.fail(w, r, errorf(http.StatusNotFound, CodeNotFound, "no run "+string(id)+": no journal"), nil)
		return
	case fromNATS(ctx, err) == forbidden || errors.Is(context.Cause(ctx), errRefused):
		// A client. The refusal ended the request's context: the read
		// goes on with the connection's.
		cctx, cancel := context.WithTimeout(r.Context(), s.cfg.RequestTimeout)
		defer cancel()
		if out.Result, err = result(cctx, ss, id, ss.user); err != nil {
			s.fail(w, r, fromNATS(cctx, err), err)
			return
		}
		if out.Result == nil {
			s.fail(w, r, errorf(http.StatusNotFound, CodeNotFound, "no result of run "+string(id)+" for this user (and its journal is not this user's to read)"), nil)
			return
		}
	default:
		s.fail(w, r, fromNATS(ctx, err), err)
		return
	}
	if out.Result != nil {
		out.Calls = runCalls(out.Result)
	}
	writeJSON(w, http.StatusOK, out)
}

// maxResultBytes bounds a stored result read back.
const maxResultBytes = 64 << 20

// storedResult reads the result of run, submitted by owner, with a direct
// get of the runs bucket: nil when none is stored.
func (s *Server) storedResult(ctx context.Context, ss *session, run protocol.RunID, owner string) (*protocol.RunResult, error) {
	data, found, err := stores.ReadRunResult(ctx, ss.rd, s.subjects, owner, run)
	if err != nil || !found {
		return nil, err
	}
	res, err := protocol.DecodeRunResult(data, maxResultBytes)
	if err != nil {
		return nil, err
	}
	return &res, nil
}

// result reads the result of run, submitted by owner, as a client does
// (its own only), nil when none is stored.
func result(ctx context.Context, ss *session, run protocol.RunID, owner string) (*protocol.RunResult, error) {
	res, err := ss.cl.Result(ctx, client.Run{ID: run, Key: protocol.RunKey(owner, run)})
	var re *client.RefusedError
	var fe *client.FailedError
	switch {
	case errors.Is(err, client.ErrNotFound):
		return nil, nil
	case errors.As(err, &re), errors.As(err, &fe):
		return res, nil
	}
	return res, err
}

// summary is what run's journal records say, with its client and agent.
func summary(run protocol.RunID, recs []stores.JournalRecord) RunSummary {
	st := runs.Summarize(run, recs)
	out := RunSummary{RunID: st.RunID, Status: st.Status, Termination: st.Termination, Owner: st.Owner, Owners: st.Owners,
		Round: st.Round, PendingCalls: st.PendingCalls, PendingApprovals: st.PendingApprovals, ApprovalDeadline: st.ApprovalDeadline,
		LastStep: st.LastStep, LastAt: st.LastAt, Entries: st.Entries, HasResult: st.HasResult, DryRun: st.DryRun}
	if len(recs) > 0 {
		out.StartedAt = recs[0].Time
	}
	out.Client, out.Agent, _ = requestOf(recs)
	return out
}

// requestOf returns the client and agent of the run's request record
// among recs (each "" when it names none, or none that is a valid
// token), and false when recs hold no request record.
func requestOf(recs []stores.JournalRecord) (client, agent string, ok bool) {
	for _, rec := range recs {
		if rec.Entry.Kind != stores.EntryRequest {
			continue
		}
		var req struct {
			Client string `json:"client"`
			Agent  string `json:"agent"`
		}
		if json.Unmarshal(rec.Entry.Data, &req) == nil {
			if protocol.ValidToken(req.Client) {
				client = req.Client
			}
			if protocol.ValidToken(req.Agent) {
				agent = req.Agent
			}
		}
		return client, agent, true
	}
	return "", "", false
}

// listRuns lists the runs with a journal, newest first, filtered by
// agent, client, status and start time.
func (s *Server) listRuns(ctx context.Context, w http.ResponseWriter, r *http.Request, ss *session) {
	q := r.URL.Query()
	for k := range q {
		switch k {
		case "agent", "client", "state", "since", "limit":
		default:
			s.fail(w, r, badField(k, "unknown query parameter "+strconv.Quote(k)), nil)
			return
		}
	}
	agent, cl, state := q.Get("agent"), q.Get("client"), q.Get("state")
	for name, v := range map[string]string{"agent": agent, "client": cl} {
		if v != "" && !protocol.ValidToken(v) {
			s.fail(w, r, badField(name, name+" must match "+protocol.TokenPattern), nil)
			return
		}
	}
	switch state {
	case "", "running", "finished", "cancel_requested":
	default:
		s.fail(w, r, badField("state", "state must be running, finished or cancel_requested"), nil)
		return
	}
	var since time.Time
	if v := q.Get("since"); v != "" {
		t, e := parseSince(v, s.cfg.Now())
		if e != nil {
			s.fail(w, r, e, nil)
			return
		}
		since = t
	}
	limit := defaultListLimit
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxListLimit {
			s.fail(w, r, badField("limit", "limit must be 1.."+strconv.Itoa(maxListLimit)), nil)
			return
		}
		limit = n
	}
	counts, err := stores.ListJournals(ctx, ss.js, s.subjects)
	if err != nil {
		s.fail(w, r, fromNATS(ctx, err), err)
		return
	}
	out := []RunSummary{}
	for id := range counts {
		recs, err := stores.ReadJournalFrom(ctx, ss.rd, s.subjects, id, 0)
		if err != nil {
			s.fail(w, r, fromNATS(ctx, err), err)
			return
		}
		if len(recs) == 0 {
			continue
		}
		sum := summary(id, recs)
		if (agent != "" && sum.Agent != agent) || (cl != "" && sum.Client != cl) ||
			(state != "" && sum.Status != state) || sum.StartedAt.Before(since) {
			continue
		}
		out = append(out, sum)
	}
	slices.SortFunc(out, func(a, b RunSummary) int {
		if c := b.StartedAt.Compare(a.StartedAt); c != 0 {
			return c
		}
		return strings.Compare(string(a.RunID), string(b.RunID))
	})
	if len(out) > limit {
		out = out[:limit]
	}
	writeJSON(w, http.StatusOK, map[string]any{"runs": out})
}

func (s *Server) cancelRun(ctx context.Context, w http.ResponseWriter, r *http.Request, ss *session) {
	id, e := runID(r, "id")
	if e != nil {
		s.fail(w, r, e, nil)
		return
	}
	var in CancelRequest
	if e := decodeBody(w, r, 16<<10, &in); e != nil {
		s.fail(w, r, e, nil)
		return
	}
	if e := checkText("reason", in.Reason, maxReasonRunes, false); e != nil {
		s.fail(w, r, e, nil)
		return
	}
	if err := ss.cl.CancelRun(ctx, id, ss.user, in.Reason); err != nil {
		s.fail(w, r, fromNATS(ctx, err), err)
		return
	}
	writeJSON(w, http.StatusAccepted, map[string]any{"run_id": id, "cancel_requested": true})
}

// parseSince reads a since query parameter: an RFC 3339 time, or a
// positive duration before now.
func parseSince(v string, now time.Time) (time.Time, *apiError) {
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return time.Time{}, badField("since", "since must be an RFC 3339 time or a positive duration (1h)")
	}
	return now.Add(-d), nil
}
