package httpapi_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/internal/httpapi"
	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/testsync"
	"github.com/toolfleet/toolfleet/pkg/agent"
	"github.com/toolfleet/toolfleet/pkg/fleettest"
	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/model/scripted"
	"github.com/toolfleet/toolfleet/pkg/serve"
	"github.com/toolfleet/toolfleet/pkg/tool"
)

type addArgs struct {
	A int `json:"a"`
	B int `json:"b"`
}

var (
	add = tool.Must(tool.New(tool.Config{Name: "add", Idempotent: true},
		func(_ context.Context, a addArgs) (int, error) { return a.A + a.B, nil }))
	refund = tool.Must(tool.New(tool.Config{Name: "refund", RequiresApproval: true},
		func(_ context.Context, a addArgs) (string, error) { return "refunded", nil }))
)

// script: round 1 adds and asks to refund (which waits for a human),
// round 2 answers.
const script = `{"turns": [
	{"tool_calls": [{"id": "c1", "name": "add", "arguments": {"a": 2, "b": 3}},
	                {"id": "c2", "name": "refund", "arguments": {"a": 1, "b": 1}}]},
	{"content": "sum {{result \"c1\"}}, refund {{result \"c2\"}}"}]}`

// api is a fleet (a server from the shipped accounts, a serving
// coordinator, a worker) and the API served over it.
type api struct {
	fleet  *fleettest.Fleet
	server *httpapi.Server
	srv    *httptest.Server
	logs   *testsync.Buffer
}

func startAPI(t *testing.T, cfg httpapi.Config) *api {
	t.Helper()
	return startAPIWith(t, cfg, fleetSetup{})
}

// fleetSetup changes startAPI's fleet: its model's script and tools
// (default: script, add and refund) and its serving coordinator's
// configuration.
type fleetSetup struct {
	script string
	tools  []harness.Tool
	serve  func(*serve.Config)
}

func startAPIWith(t *testing.T, cfg httpapi.Config, fs fleetSetup) *api {
	t.Helper()
	if fs.script == "" {
		fs.script, fs.tools = script, []harness.Tool{add, refund}
	}
	model, err := scripted.Parse([]byte(fs.script))
	if err != nil {
		t.Fatal(err)
	}
	math, err := agent.Parse([]byte(`{"name": "math", "instructions": "Add.",
		"model": {"provider": "scripted", "script": {"turns": [{"content": "done"}]}}, "tools": ["add"]}`))
	if err != nil {
		t.Fatal(err)
	}
	sc := &serve.Config{Model: model, ShutdownGrace: time.Second, PollWait: 100 * time.Millisecond}
	if fs.serve != nil {
		fs.serve(sc)
	}
	fleet := fleettest.Start(t, fleettest.Config{
		Tools:  fs.tools,
		Agents: []agent.Definition{math},
		Listen: true,
		Serve:  sc,
	})
	u, err := url.Parse(fleet.URL())
	if err != nil {
		t.Fatal(err)
	}
	u.User = nil
	natsURL := u.String()
	logs := &testsync.Buffer{}
	cfg.Logger = zerolog.New(logs)
	cfg.Dial = httpapi.NATSDialer(natsbus.ConnConfig{URL: natsURL})
	s, err := httpapi.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s)
	t.Cleanup(func() { srv.Close(); s.Close() })
	return &api{fleet: fleet, server: s, srv: srv, logs: logs}
}

// user is one logged-in browser: a cookie jar and the CSRF token.
type user struct {
	t    *testing.T
	a    *api
	c    *http.Client
	csrf string
}

func (a *api) login(t *testing.T, name string) *user {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	u := &user{t: t, a: a, c: &http.Client{Jar: jar}}
	var info httpapi.SessionInfo
	if st := u.do("POST", "/v1/session", nil, map[string]string{"user": name, "password": a.fleet.Password(name)}, &info); st != http.StatusCreated {
		t.Fatalf("login as %s: status %d", name, st)
	}
	u.csrf = info.CSRFToken
	validate(t, "SessionInfo", info)
	return u
}

// do sends a request with the session's CSRF token and a same-origin
// Origin, decodes the answer into out (if not nil) and returns the status.
func (u *user) do(method, path string, hdr map[string]string, body any, out any) int {
	u.t.Helper()
	var rd io.Reader
	if body != nil {
		data, _ := json.Marshal(body)
		rd = bytes.NewReader(data)
	}
	req, _ := http.NewRequestWithContext(u.t.Context(), method, u.a.srv.URL+path, rd)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Origin", u.a.srv.URL)
	if u.csrf != "" {
		req.Header.Set(httpapi.CSRFHeader, u.csrf)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := u.c.Do(req)
	if err != nil {
		u.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(data, out); err != nil {
			u.t.Fatalf("%s %s: %v: %s", method, path, err, data)
		}
	}
	return resp.StatusCode
}

// stream reads a run's events until stop says so or the stream ends,
// starting after lastID ("" for the start).
func (u *user) stream(run, lastID string, stop func(ev sseEvent) bool) []sseEvent {
	u.t.Helper()
	return u.sse("/v1/runs/"+run+"/events", lastID, nil, stop)
}

// sse reads the server-sent events of path until stop says so or the
// stream ends, starting after lastID ("" for the start); opened, if not
// nil, is called once the stream is answered.
func (u *user) sse(path, lastID string, opened func(), stop func(ev sseEvent) bool) []sseEvent {
	u.t.Helper()
	evs, cancel := u.open(path, lastID)
	defer cancel()
	if opened != nil {
		opened()
	}
	var out []sseEvent
	for ev := range evs {
		if ev.err != nil {
			u.t.Fatalf("event data: %v", ev.err)
		}
		out = append(out, ev)
		if stop != nil && stop(ev) {
			break
		}
	}
	return out
}

// open opens the server-sent events of path after lastID ("" for the
// start) and returns them as they come (the channel is closed when the
// stream ends) and a cancel that closes the stream. The stream is
// answered when it returns.
func (u *user) open(path, lastID string) (<-chan sseEvent, context.CancelFunc) {
	u.t.Helper()
	ctx, cancel := context.WithTimeout(u.t.Context(), time.Minute)
	req, _ := http.NewRequestWithContext(ctx, "GET", u.a.srv.URL+path, nil)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := u.c.Do(req)
	if err != nil {
		cancel()
		u.t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		resp.Body.Close()
		cancel()
		u.t.Fatalf("events: status %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	evs := make(chan sseEvent)
	go func() {
		defer close(evs)
		defer resp.Body.Close()
		var cur sseEvent
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "id: "):
				cur.id = line[4:]
			case strings.HasPrefix(line, "event: "):
				cur.kind = line[7:]
			case strings.HasPrefix(line, "data: "):
				cur.raw = json.RawMessage(line[6:])
				if cur.kind != httpapi.EventApproval {
					cur.err = json.Unmarshal(cur.raw, &cur.data)
				}
			case line == "" && cur.kind != "":
				select {
				case evs <- cur:
				case <-ctx.Done():
					return
				}
				cur = sseEvent{}
			}
		}
	}()
	return evs, cancel
}

// journaled returns the events of evs that have an id: those of the
// journal (and a client's result), without the live ones (progress and
// call_started), which a resumed stream does not replay.
func journaled(evs []sseEvent) []sseEvent {
	var out []sseEvent
	for _, ev := range evs {
		if ev.id != "" {
			out = append(out, ev)
		}
	}
	return out
}

type sseEvent struct {
	id, kind string
	data     httpapi.Event
	raw      json.RawMessage
	err      error // decoding data
}

// TestIdempotentSubmitAndResumedStream: two POSTs with one
// Idempotency-Key give one run (201, then 200 with the same id); the
// operator's stream of its events, cut after the approval request and
// resumed with Last-Event-ID after the approval, holds every event of a
// full stream read after the run ended, none missed and none twice (the
// journal's events: the live ones, progress and call_started, are not
// replayed).
func TestIdempotentSubmitAndResumedStream(t *testing.T) {
	a := startAPI(t, httpapi.Config{})
	cl := a.login(t, "client")
	op := a.login(t, "operator")

	var first, second httpapi.Submitted
	hdr := map[string]string{httpapi.IdempotencyKeyHeader: "order-42"}
	if st := cl.do("POST", "/v1/runs", hdr, map[string]any{"prompt": "refund order 42"}, &first); st != http.StatusCreated {
		t.Fatalf("first POST: status %d, want 201", st)
	}
	if st := cl.do("POST", "/v1/runs", hdr, map[string]any{"prompt": "refund order 42"}, &second); st != http.StatusOK {
		t.Fatalf("second POST: status %d, want 200", st)
	}
	validate(t, "Submitted", second)
	if first.RunID != second.RunID || !second.Duplicate {
		t.Fatalf("runs %s and %s (duplicate %v), want one run", first.RunID, second.RunID, second.Duplicate)
	}
	run := string(first.RunID)

	head := journaled(op.stream(run, "", func(ev sseEvent) bool { return ev.kind == httpapi.EventApprovalRequested }))
	testsync.WaitUntil(t, 30*time.Second, "the approval request is stored", func() bool {
		var l struct {
			Approvals []httpapi.Approval `json:"approvals"`
		}
		return op.do("GET", "/v1/approvals", nil, nil, &l) == http.StatusOK && len(l.Approvals) == 1
	})
	last := head[len(head)-1]
	if last.kind != httpapi.EventApprovalRequested || len(last.data.Calls) != 1 || last.data.Calls[0].Tool != "refund" {
		t.Fatalf("the stream's last event is %+v, want the refund's approval request", last)
	}
	var dec httpapi.DecisionResult
	key := string(last.data.Calls[0].CallKey)
	if st := op.do("POST", "/v1/approvals/"+run+"/"+key, nil, map[string]string{"decision": "approve"}, &dec); st != http.StatusOK || dec.Outcome != "approved" || dec.Approver != "operator" {
		t.Fatalf("approve: status %d %+v, want 200 approved by operator", st, dec)
	}
	validate(t, "DecisionResult", dec)
	tail := journaled(op.stream(run, last.id, nil))
	if k := tail[len(tail)-1].kind; k != httpapi.EventFinished {
		t.Fatalf("the resumed stream ends with %s, want finished", k)
	}
	full := journaled(op.stream(run, "", nil))
	got := append(append([]sseEvent{}, head...), tail...)
	if len(got) != len(full) {
		t.Fatalf("head %d + tail %d events, a full stream %d", len(head), len(tail), len(full))
	}
	for i := range full {
		if got[i].id != full[i].id || got[i].kind != full[i].kind {
			t.Fatalf("event %d: %s %s, a full stream has %s %s", i, got[i].id, got[i].kind, full[i].id, full[i].kind)
		}
	}
	for _, ev := range full {
		validate(t, "Event", ev.data)
	}
	// Resumed after any event (those a round stores in one message among
	// them), the stream holds exactly the events after it.
	for i, ev := range full[:len(full)-1] {
		rest := journaled(op.stream(run, ev.id, nil))
		if len(rest) != len(full)-i-1 || rest[0].id != full[i+1].id {
			t.Fatalf("resumed after %s (%s): %d events from %s, want %d from %s", ev.id, ev.kind, len(rest), rest[0].id, len(full)-i-1, full[i+1].id)
		}
	}
	if a := full[len(full)-1].data.Answer; a != "sum 5, refund refunded" {
		t.Fatalf("answer %q", a)
	}
	// the client reads its run's result
	var r httpapi.Run
	if st := cl.do("GET", "/v1/runs/"+run, nil, nil, &r); st != http.StatusOK || r.Result == nil || r.Result.Answer != "sum 5, refund refunded" {
		t.Fatalf("client GET run: status %d %+v", st, r.Result)
	}
	validate(t, "Run", r)
	// its stream, with no journal to read, is its run's result
	if evs := cl.stream(run, "", nil); len(evs) != 1 || evs[0].kind != httpapi.EventFinished || evs[0].id != "result" || evs[0].data.Answer != "sum 5, refund refunded" {
		t.Fatalf("the client's stream: %+v, want the finished event with id result", evs)
	}
	if evs := cl.stream(run, "result", nil); len(evs) != 0 {
		t.Fatalf("the client's stream resumed after its result: %+v, want none", evs)
	}
	// and the operator the journal's state as well
	if st := op.do("GET", "/v1/runs/"+run, nil, nil, &r); st != http.StatusOK || r.State == nil || r.State.Client != "client" || r.Result == nil {
		t.Fatalf("operator GET run: status %d state %+v", st, r.State)
	}
	validate(t, "Run", r)
	if len(r.Calls) != 2 || r.Calls[0].CallID != "c1" || r.Calls[0].Outcome != "ok" || r.Calls[0].Observation != "5" || r.Calls[0].Worker == "" ||
		r.Calls[1].Tool != "refund" || r.Calls[1].Observation != "refunded" {
		t.Fatalf("the run's calls: %+v", r.Calls)
	}
	var list struct {
		Runs []httpapi.RunSummary `json:"runs"`
	}
	if st := op.do("GET", "/v1/runs?client=client&state=finished&since=1h", nil, nil, &list); st != http.StatusOK || len(list.Runs) != 1 || list.Runs[0].RunID != first.RunID {
		t.Fatalf("operator lists runs: status %d %+v", st, list.Runs)
	}
	validate(t, "RunList", list)
	if st := op.do("GET", "/v1/runs?agent=math", nil, nil, &list); st != http.StatusOK || len(list.Runs) != 0 {
		t.Fatalf("operator lists another agent's runs: status %d %+v", st, list.Runs)
	}
}

// TestEachRoleAsNATSPermits: a client submits and reads its own run, and
// may not approve, cancel, list runs or pause a tool; the viewer reads
// everything the console shows and may change nothing; the operator may
// list, cancel and pause, and may not submit. Every refusal is NATS's
// (403).
func TestEachRoleAsNATSPermits(t *testing.T) {
	a := startAPI(t, httpapi.Config{})
	cl := a.login(t, "client")
	op := a.login(t, "operator")
	vw := a.login(t, "viewer")
	var sub httpapi.Submitted
	if st := cl.do("POST", "/v1/runs", nil, map[string]any{"prompt": "hi"}, &sub); st != http.StatusCreated {
		t.Fatalf("client submit: %d", st)
	}
	run := string(sub.RunID)
	testsync.WaitUntil(t, 30*time.Second, "the refund waits for approval", func() bool {
		var l struct {
			Approvals []httpapi.Approval `json:"approvals"`
		}
		return op.do("GET", "/v1/approvals", nil, nil, &l) == http.StatusOK && len(l.Approvals) == 1
	})
	var l struct {
		Approvals []httpapi.Approval `json:"approvals"`
	}
	op.do("GET", "/v1/approvals", nil, nil, &l)
	validate(t, "ApprovalList", l)
	var tools struct {
		Tools []httpapi.Tool `json:"tools"`
	}
	if st := op.do("GET", "/v1/tools", nil, nil, &tools); st != http.StatusOK || len(tools.Tools) != 2 || len(tools.Tools[0].Workers) != 1 {
		t.Fatalf("tools: status %d %+v, want add and refund, each on one worker", st, tools.Tools)
	}
	validate(t, "ToolList", tools)
	var agents struct {
		Agents []string `json:"agents"`
	}
	if st := op.do("GET", "/v1/agents", nil, nil, &agents); st != http.StatusOK || len(agents.Agents) != 1 || agents.Agents[0] != "math" {
		t.Fatalf("agents: %d %v", st, agents.Agents)
	}
	validate(t, "AgentList", agents)
	var math httpapi.Agent
	var def struct{ Instructions string }
	if st := op.do("GET", "/v1/agents/math", nil, nil, &math); st != http.StatusOK || math.Revision == 0 ||
		json.Unmarshal(math.Definition, &def) != nil || def.Instructions != "Add." {
		t.Fatalf("agent math: %d %+v", st, math)
	}
	validate(t, "Agent", math)
	// the viewer sees what the operator sees
	var vl struct {
		Approvals []httpapi.Approval `json:"approvals"`
	}
	if st := vw.do("GET", "/v1/approvals", nil, nil, &vl); st != http.StatusOK || len(vl.Approvals) != 1 || vl.Approvals[0].Digest != l.Approvals[0].Digest {
		t.Fatalf("viewer lists approvals: status %d %+v", st, vl.Approvals)
	}
	// the viewer's account asks none of the fleet's workers: the tools
	// come from the catalog, without the workers that serve them
	if st := vw.do("GET", "/v1/tools", nil, nil, &tools); st != http.StatusOK || len(tools.Tools) != 2 || tools.Tools[0].Name != "add" ||
		tools.Tools[1].Name != "refund" || len(tools.Tools[0].Workers) != 0 || !tools.Tools[1].RequiresApproval {
		t.Fatalf("viewer lists tools: status %d %+v, want add and refund from the catalog, no worker", st, tools.Tools)
	}
	var vr httpapi.Run
	if st := vw.do("GET", "/v1/runs/"+string(sub.RunID), nil, nil, &vr); st != http.StatusOK || vr.RunID != sub.RunID || vr.State == nil {
		t.Fatalf("viewer reads the run: status %d %+v", st, vr)
	}
	ap := l.Approvals[0]
	var args bytes.Buffer
	_ = json.Compact(&args, ap.Arguments)
	if ap.Tool != "refund" || args.String() != `{"a":1,"b":1}` || ap.Digest == "" || ap.RunID != sub.RunID {
		t.Fatalf("approval %+v", ap)
	}
	for _, tc := range []struct {
		name, method, path string
		who                *user
		body               any
		want               int
	}{
		{"client approves", "POST", "/v1/approvals/" + run + "/" + string(ap.CallKey), cl, map[string]string{"decision": "approve"}, http.StatusForbidden},
		{"client lists approvals", "GET", "/v1/approvals", cl, nil, http.StatusForbidden},
		{"client cancels", "POST", "/v1/runs/" + run + "/cancel", cl, map[string]string{"reason": "mine"}, http.StatusForbidden},
		{"client pauses a tool", "POST", "/v1/tools/add/pause", cl, map[string]string{"reason": "x"}, http.StatusForbidden},
		{"client lists runs", "GET", "/v1/runs", cl, nil, http.StatusForbidden},
		{"client reads a run not its own", "GET", "/v1/runs/someoneelses", cl, nil, http.StatusNotFound},
		{"client lists tools", "GET", "/v1/tools", cl, nil, http.StatusForbidden},
		{"client reads a tool's history", "GET", "/v1/tools/add/history", cl, nil, http.StatusForbidden},
		{"client reads the decisions", "GET", "/v1/approvals/decisions", cl, nil, http.StatusForbidden},
		{"client lists agents", "GET", "/v1/agents", cl, nil, http.StatusForbidden},
		{"viewer lists runs", "GET", "/v1/runs?client=client", vw, nil, http.StatusOK},
		{"viewer reads a run", "GET", "/v1/runs/" + run, vw, nil, http.StatusOK},
		{"viewer lists approvals", "GET", "/v1/approvals", vw, nil, http.StatusOK},
		{"viewer reads the decisions", "GET", "/v1/approvals/decisions", vw, nil, http.StatusOK},
		{"viewer lists tools", "GET", "/v1/tools", vw, nil, http.StatusOK},
		{"viewer reads a tool's history", "GET", "/v1/tools/add/history", vw, nil, http.StatusOK},
		{"viewer lists agents", "GET", "/v1/agents", vw, nil, http.StatusOK},
		{"viewer reads an agent", "GET", "/v1/agents/math", vw, nil, http.StatusOK},
		{"viewer approves", "POST", "/v1/approvals/" + run + "/" + string(ap.CallKey), vw, map[string]string{"decision": "approve"}, http.StatusForbidden},
		{"viewer denies", "POST", "/v1/approvals/" + run + "/" + string(ap.CallKey), vw, map[string]string{"decision": "deny", "reason": "no"}, http.StatusForbidden},
		{"viewer cancels", "POST", "/v1/runs/" + run + "/cancel", vw, map[string]string{"reason": "x"}, http.StatusForbidden},
		{"viewer pauses a tool", "POST", "/v1/tools/add/pause", vw, map[string]string{"reason": "x"}, http.StatusForbidden},
		{"viewer resumes a tool", "POST", "/v1/tools/add/resume", vw, map[string]string{"reason": "x"}, http.StatusForbidden},
		{"viewer limits a tool", "POST", "/v1/tools/add/limit", vw, map[string]any{"rate": 5, "burst": 2, "reason": "x"}, http.StatusForbidden},
		{"viewer submits", "POST", "/v1/runs", vw, map[string]any{"prompt": "hi"}, http.StatusForbidden},
		{"operator lists agents", "GET", "/v1/agents", op, nil, http.StatusOK},
		{"operator reads an agent", "GET", "/v1/agents/math", op, nil, http.StatusOK},
		{"operator reads no agent", "GET", "/v1/agents/nope", op, nil, http.StatusNotFound},
		{"operator limits a tool", "POST", "/v1/tools/add/limit", op, map[string]any{"rate": 5, "burst": 2, "reason": "quota"}, http.StatusOK},
		{"operator submits", "POST", "/v1/runs", op, map[string]any{"prompt": "hi"}, http.StatusForbidden},
		{"operator lists runs", "GET", "/v1/runs?client=client", op, nil, http.StatusOK},
		{"operator lists tools", "GET", "/v1/tools", op, nil, http.StatusOK},
		{"operator pauses a tool", "POST", "/v1/tools/add/pause", op, map[string]string{"reason": "maintenance"}, http.StatusOK},
		{"operator resumes it", "POST", "/v1/tools/add/resume", op, map[string]string{"reason": "done"}, http.StatusOK},
		{"operator denies", "POST", "/v1/approvals/" + run + "/" + string(ap.CallKey), op, map[string]string{"decision": "deny", "reason": "not today"}, http.StatusOK},
		{"operator cancels", "POST", "/v1/runs/" + run + "/cancel", op, map[string]string{"reason": "test"}, http.StatusAccepted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.who.t = t
			if st := tc.who.do(tc.method, tc.path, nil, tc.body, nil); st != tc.want {
				t.Fatalf("status %d, want %d", st, tc.want)
			}
		})
	}
}

// TestRefusedRequests: no session, a cross-site POST, a missing CSRF
// token, hostile bodies and a bad password each get a clear JSON error,
// and the canary password never reaches a response or a log line.
func TestRefusedRequests(t *testing.T) {
	a := startAPI(t, httpapi.Config{MaxBodyBytes: 4 << 10})
	cl := a.login(t, "client")
	anon := &user{t: t, a: a, c: &http.Client{}}
	const canary = "canary-Pw-7f3a9"
	crossSite := &user{t: t, a: a, c: cl.c, csrf: cl.csrf}
	for _, tc := range []struct {
		name     string
		u        *user
		method   string
		path     string
		hdr      map[string]string
		body     any
		want     int
		wantCode string
	}{
		{"no session", anon, "GET", "/v1/runs/x", nil, nil, 401, httpapi.CodeUnauthenticated},
		{"no session POST", anon, "POST", "/v1/runs", nil, map[string]any{"prompt": "x"}, 401, httpapi.CodeUnauthenticated},
		{"cross-site Origin", crossSite, "POST", "/v1/runs", map[string]string{"Origin": "https://evil.example"}, map[string]any{"prompt": "x"}, 403, httpapi.CodeCrossSite},
		{"cross-site fetch", crossSite, "POST", "/v1/runs", map[string]string{"Sec-Fetch-Site": "cross-site"}, map[string]any{"prompt": "x"}, 403, httpapi.CodeCrossSite},
		{"no CSRF token", crossSite, "POST", "/v1/runs", map[string]string{httpapi.CSRFHeader: "wrong"}, map[string]any{"prompt": "x"}, 403, httpapi.CodeCrossSite},
		{"huge body", cl, "POST", "/v1/runs", nil, map[string]any{"prompt": strings.Repeat("x", 8<<10)}, 413, httpapi.CodeTooLarge},
		{"unknown field", cl, "POST", "/v1/runs", nil, map[string]any{"prompt": "x", "sudo": true}, 400, httpapi.CodeBadRequest},
		{"bad JSON", cl, "POST", "/v1/runs", nil, json.RawMessage(`{"prompt": `), 400, httpapi.CodeBadRequest},
		{"control characters in a reason", cl, "POST", "/v1/approvals/r1/k1", nil, map[string]string{"decision": "deny", "reason": "ok\n\x1b[2J"}, 400, httpapi.CodeBadRequest},
		{"bad idempotency key", cl, "POST", "/v1/runs", map[string]string{httpapi.IdempotencyKeyHeader: "a.b"}, map[string]any{"prompt": "x"}, 400, httpapi.CodeBadRequest},
		{"wrong password", anon, "POST", "/v1/session", nil, map[string]string{"user": "operator", "password": canary}, 401, httpapi.CodeUnauthenticated},
		{"cross-site login", anon, "POST", "/v1/session", map[string]string{"Origin": "https://evil.example"}, map[string]string{"user": "operator", "password": canary}, 403, httpapi.CodeCrossSite},
		{"credentials in the URL", anon, "POST", "/v1/session?user=operator&password=" + canary, map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, json.RawMessage("user=operator"), 400, httpapi.CodeBadRequest},
		{"a form to a JSON route", cl, "POST", "/v1/runs", map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, json.RawMessage("prompt=x"), 415, httpapi.CodeBadRequest},
		{"Basic with a wrong password", anon, "GET", "/v1/tools", map[string]string{"Authorization": basic("operator", canary)}, nil, 401, httpapi.CodeUnauthenticated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.u.t = t
			var rd io.Reader
			if raw, ok := tc.body.(json.RawMessage); ok {
				rd = bytes.NewReader(raw)
			} else if tc.body != nil {
				data, _ := json.Marshal(tc.body)
				rd = bytes.NewReader(data)
			}
			req, _ := http.NewRequestWithContext(t.Context(), tc.method, a.srv.URL+tc.path, rd)
			req.Header.Set("Origin", a.srv.URL)
			if tc.u.csrf != "" {
				req.Header.Set(httpapi.CSRFHeader, tc.u.csrf)
			}
			for k, v := range tc.hdr {
				req.Header.Set(k, v)
			}
			resp, err := tc.u.c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			data, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var e struct {
				Error struct{ Code, Message string }
			}
			if resp.StatusCode != tc.want || json.Unmarshal(data, &e) != nil || e.Error.Code != tc.wantCode || e.Error.Message == "" {
				t.Fatalf("status %d %s, want %d with code %s", resp.StatusCode, data, tc.want, tc.wantCode)
			}
			if resp.Header.Get("WWW-Authenticate") != "" || resp.Header.Get("Set-Cookie") != "" {
				t.Fatalf("a refusal set a cookie or asked the browser for credentials: %v", resp.Header)
			}
			if bytes.Contains(data, []byte(canary)) {
				t.Fatalf("the response quotes the password: %s", data)
			}
		})
	}
	if strings.Contains(a.logs.String(), canary) || strings.Contains(a.logs.String(), a.fleet.Password("client")) {
		t.Fatalf("a password reached the log:\n%s", a.logs.String())
	}
}

// TestLoginAttemptsBounded: past LoginFailures failed logins of one user,
// even the right password is refused (429) until the window passes.
func TestLoginAttemptsBounded(t *testing.T) {
	a := startAPI(t, httpapi.Config{LoginFailures: 3})
	anon := &user{t: t, a: a, c: &http.Client{}}
	for i := range 3 {
		if st := anon.do("POST", "/v1/session", nil, map[string]string{"user": "operator", "password": fmt.Sprintf("guess-%d", i)}, nil); st != http.StatusUnauthorized {
			t.Fatalf("guess %d: status %d, want 401", i, st)
		}
	}
	if st := anon.do("POST", "/v1/session", nil, map[string]string{"user": "operator", "password": a.fleet.Password("operator")}, nil); st != http.StatusTooManyRequests {
		t.Fatalf("the right password after 3 failures: status %d, want 429", st)
	}
}

// TestBasicAuth: a program with Authorization: Basic submits and reads a
// run with no cookie.
func TestBasicAuth(t *testing.T) {
	a := startAPI(t, httpapi.Config{})
	prog := &user{t: t, a: a, c: &http.Client{}}
	hdr := map[string]string{"Authorization": basic("client", a.fleet.Password("client")), "Origin": ""}
	var sub httpapi.Submitted
	req, _ := http.NewRequestWithContext(t.Context(), "POST", a.srv.URL+"/v1/runs", strings.NewReader(`{"prompt": "hi"}`))
	req.Header.Set("Authorization", hdr["Authorization"])
	resp, err := prog.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusCreated || resp.Header.Get("Set-Cookie") != "" {
		t.Fatalf("status %d, Set-Cookie %q", resp.StatusCode, resp.Header.Get("Set-Cookie"))
	}
	if err := json.NewDecoder(resp.Body).Decode(&sub); err != nil || !sub.RunID.Valid() {
		t.Fatalf("%+v %v", sub, err)
	}
}

func basic(user, password string) string {
	r, _ := http.NewRequest("GET", "/", nil)
	r.SetBasicAuth(user, password)
	return r.Header.Get("Authorization")
}

// TestToolsShowPauseAndQueue: a tool the operator paused through the API
// shows paused, with the call a run made waiting in its queue; resumed,
// the call runs and the run finishes. The pause and the resume are in the
// tool's history, by the operator's NATS user, with their reasons.
func TestToolsShowPauseAndQueue(t *testing.T) {
	a := startAPI(t, httpapi.Config{})
	cl := a.login(t, "client")
	op := a.login(t, "operator")
	if st := op.do("POST", "/v1/tools/add/pause", nil, map[string]string{"reason": "maintenance"}, nil); st != http.StatusOK {
		t.Fatalf("pause: %d", st)
	}
	var sub httpapi.Submitted
	if st := cl.do("POST", "/v1/runs", nil, map[string]any{"prompt": "hi"}, &sub); st != http.StatusCreated {
		t.Fatalf("submit: %d", st)
	}
	var l struct {
		Approvals []httpapi.Approval `json:"approvals"`
	}
	testsync.WaitUntil(t, 30*time.Second, "the refund waits for approval", func() bool {
		return op.do("GET", "/v1/approvals", nil, nil, &l) == http.StatusOK && len(l.Approvals) == 1
	})
	if st := op.do("POST", "/v1/approvals/"+string(sub.RunID)+"/"+string(l.Approvals[0].CallKey), nil, map[string]string{"decision": "deny", "reason": "no"}, nil); st != http.StatusOK {
		t.Fatalf("deny: %d", st)
	}
	add := func() httpapi.Tool {
		var tools struct {
			Tools []httpapi.Tool `json:"tools"`
		}
		if st := op.do("GET", "/v1/tools", nil, nil, &tools); st != http.StatusOK {
			t.Fatalf("tools: %d", st)
		}
		for _, tl := range tools.Tools {
			if tl.Name == "add" {
				return tl
			}
		}
		t.Fatal("no tool add")
		return httpapi.Tool{}
	}
	testsync.WaitUntil(t, 30*time.Second, "the add call waits in the paused tool's queue", func() bool {
		tl := add()
		return tl.Paused && tl.Waiting == 1
	})
	if st := op.do("POST", "/v1/tools/add/resume", nil, map[string]string{"reason": "done"}, nil); st != http.StatusOK {
		t.Fatalf("resume: %d", st)
	}
	var r httpapi.Run
	testsync.WaitUntil(t, 30*time.Second, "the run finishes", func() bool {
		return cl.do("GET", "/v1/runs/"+string(sub.RunID), nil, nil, &r) == http.StatusOK && r.Result != nil
	})
	if tl := add(); tl.Paused || tl.Waiting != 0 {
		t.Fatalf("after the run: %+v", tl)
	}
	var d struct {
		Decisions []httpapi.Decided `json:"decisions"`
	}
	if st := op.do("GET", "/v1/approvals/decisions?since=1h", nil, nil, &d); st != http.StatusOK || len(d.Decisions) != 1 ||
		d.Decisions[0].Outcome != "denied" || d.Decisions[0].Approver != "operator" || d.Decisions[0].Reason != "no" || d.Decisions[0].RunID != sub.RunID {
		t.Fatalf("decisions: %d %+v, want the operator's denial", st, d.Decisions)
	}
	validate(t, "DecisionList", d)
	var h struct {
		History []struct{ Action, By, Reason string } `json:"history"`
	}
	if st := op.do("GET", "/v1/tools/add/history", nil, nil, &h); st != http.StatusOK || len(h.History) != 2 ||
		h.History[0].By != "operator" || h.History[0].Reason != "maintenance" || h.History[1].Reason != "done" {
		t.Fatalf("history: %d %+v", st, h.History)
	}
}

// TestStreamsBoundedAndViewersNeverHoldARun: with MaxStreams 2, two
// viewers that attach to a run's events and never read hold the only two
// streams — a third gets a 503 — until they vanish (their connections
// closed): then a new viewer gets a stream while the run still waits.
// And they hold nothing else: two such viewers attached, the run is
// approved and finishes.
func TestStreamsBoundedAndViewersNeverHoldARun(t *testing.T) {
	a := startAPI(t, httpapi.Config{MaxStreams: 2})
	cl := a.login(t, "client")
	op := a.login(t, "operator")
	var sub httpapi.Submitted
	if st := cl.do("POST", "/v1/runs", nil, map[string]any{"prompt": "hi"}, &sub); st != http.StatusCreated {
		t.Fatalf("submit: %d", st)
	}
	run := string(sub.RunID)
	auth := basic("operator", a.fleet.Password("operator"))
	// stall opens two viewers that read their answer's status line and
	// nothing more; each holds a stream (a viewer refused while a closed
	// one's stream is still being freed is opened again).
	stall := func() []net.Conn {
		var conns []net.Conn
		testsync.WaitUntil(t, 30*time.Second, "two stalled viewers each given a stream", func() bool {
			c, err := net.Dial("tcp", a.srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			fmt.Fprintf(c, "GET /v1/runs/%s/events HTTP/1.1\r\nHost: %s\r\nAuthorization: %s\r\n\r\n", run, a.srv.Listener.Addr(), auth)
			status, err := bufio.NewReader(c).ReadString('\n')
			if err != nil || !strings.Contains(status, " 200 ") {
				c.Close()
				return false
			}
			conns = append(conns, c)
			return len(conns) == 2
		})
		return conns
	}
	// another viewer's status: its stream, if it gets one, is closed at once
	another := func() int {
		req, _ := http.NewRequestWithContext(t.Context(), "GET", a.srv.URL+"/v1/runs/"+run+"/events", nil)
		req.Header.Set("Authorization", auth)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	var l struct {
		Approvals []httpapi.Approval `json:"approvals"`
	}
	testsync.WaitUntil(t, 30*time.Second, "the refund waits for approval", func() bool {
		return op.do("GET", "/v1/approvals", nil, nil, &l) == http.StatusOK && len(l.Approvals) == 1
	})
	stalled := stall()
	testsync.WaitUntil(t, 30*time.Second, "both stalled viewers hold a stream", func() bool { return another() == http.StatusServiceUnavailable })
	for _, c := range stalled {
		c.Close()
	}
	testsync.WaitUntil(t, 30*time.Second, "the vanished viewers' streams are freed", func() bool { return another() == http.StatusOK })

	stall()
	testsync.WaitUntil(t, 30*time.Second, "two stalled viewers hold a stream again", func() bool { return another() == http.StatusServiceUnavailable })
	if st := op.do("POST", "/v1/approvals/"+run+"/"+string(l.Approvals[0].CallKey), nil, map[string]string{"decision": "approve"}, nil); st != http.StatusOK {
		t.Fatalf("approve: %d", st)
	}
	var r httpapi.Run
	testsync.WaitUntil(t, 30*time.Second, "the run finishes with two viewers that never read", func() bool {
		return cl.do("GET", "/v1/runs/"+run, nil, nil, &r) == http.StatusOK && r.Result != nil
	})
}

// TestApprovalsAppearLive: the operator's approvals stream, open before
// the run is submitted, delivers the run's approval request when it is
// stored (what a page shows without a reload), with the id a reconnect
// names; a client's is refused (403), as NATS refuses it the approvals.
func TestApprovalsAppearLive(t *testing.T) {
	a := startAPI(t, httpapi.Config{})
	cl := a.login(t, "client")
	op := a.login(t, "operator")
	var sub httpapi.Submitted
	evs := op.sse("/v1/approvals/events", "", func() {
		if st := cl.do("POST", "/v1/runs", nil, map[string]any{"prompt": "hi"}, &sub); st != http.StatusCreated {
			t.Errorf("submit: %d", st)
		}
	}, func(sseEvent) bool { return true })
	var ap httpapi.Approval
	if err := json.Unmarshal(evs[0].raw, &ap); err != nil || evs[0].kind != httpapi.EventApproval || ap.RunID != sub.RunID ||
		ap.Tool != "refund" || evs[0].id != fmt.Sprint(ap.Sequence) {
		t.Fatalf("approvals stream: %s %s %s (%v), want the refund's request of run %s", evs[0].kind, evs[0].id, evs[0].raw, err, sub.RunID)
	}
	validate(t, "Approval", ap)
	req, _ := http.NewRequestWithContext(t.Context(), "GET", a.srv.URL+"/v1/approvals/events", nil)
	resp, err := cl.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a client's approvals stream: status %d, want 403", resp.StatusCode)
	}
}

// TestStreamsPerSession: with MaxSessionStreams 1, a program whose Basic
// credentials hold a stream gets a 429 for a second one, and another
// session (a login) still gets its stream: one user cannot hold them all.
func TestStreamsPerSession(t *testing.T) {
	a := startAPI(t, httpapi.Config{MaxSessionStreams: 1})
	op := a.login(t, "operator")
	auth := basic("operator", a.fleet.Password("operator"))
	c, err := net.Dial("tcp", a.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET /v1/approvals/events HTTP/1.1\r\nHost: %s\r\nAuthorization: %s\r\n\r\n", a.srv.Listener.Addr(), auth)
	status := func(auth string, cl *http.Client) (int, string) {
		req, _ := http.NewRequestWithContext(t.Context(), "GET", a.srv.URL+"/v1/approvals/events", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var e struct{ Error struct{ Code string } }
		if resp.StatusCode != http.StatusOK {
			json.NewDecoder(resp.Body).Decode(&e)
		}
		return resp.StatusCode, e.Error.Code
	}
	testsync.WaitUntil(t, 30*time.Second, "the program's second stream is refused", func() bool {
		st, code := status(auth, http.DefaultClient)
		return st == http.StatusTooManyRequests && code == httpapi.CodeTooManyStreams
	})
	if st, _ := status("", op.c); st != http.StatusOK {
		t.Fatalf("another session's stream: status %d, want 200", st)
	}
}

// TestSessionEnds: after a logout the session's cookie is refused (401),
// and so is one left unused past IdleTimeout; the cookie of a login is
// HttpOnly and SameSite=Strict, and Secure with SecureCookies.
func TestSessionEnds(t *testing.T) {
	a := startAPI(t, httpapi.Config{IdleTimeout: 2 * time.Second, SecureCookies: true})
	req, _ := http.NewRequestWithContext(t.Context(), "POST", a.srv.URL+"/v1/session", strings.NewReader(
		fmt.Sprintf(`{"user": "operator", "password": %q}`, a.fleet.Password("operator"))))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	set := resp.Header.Get("Set-Cookie")
	for _, want := range []string{httpapi.CookieName + "=", "HttpOnly", "SameSite=Strict", "Secure", "Path=/"} {
		if !strings.Contains(set, want) {
			t.Fatalf("Set-Cookie %q lacks %s", set, want)
		}
	}
	session := resp.Cookies()[0]
	get := func(c *http.Cookie) int {
		req, _ := http.NewRequestWithContext(t.Context(), "GET", a.srv.URL+"/v1/session", nil)
		req.AddCookie(c)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if st := get(session); st != http.StatusOK {
		t.Fatalf("the session: %d", st)
	}
	// (asking would use it: the test waits for the server to close it)
	testsync.WaitUntil(t, 30*time.Second, "the idle session ends", func() bool { return httpapi.OpenSessions(a.server) == 0 })
	if st := get(session); st != http.StatusUnauthorized {
		t.Fatalf("the idle session's cookie: %d, want 401", st)
	}

	// a logout ends another at once
	var info httpapi.SessionInfo
	req, _ = http.NewRequestWithContext(t.Context(), "POST", a.srv.URL+"/v1/session", strings.NewReader(
		fmt.Sprintf(`{"user": "operator", "password": %q}`, a.fleet.Password("operator"))))
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	json.NewDecoder(resp.Body).Decode(&info)
	resp.Body.Close()
	second := resp.Cookies()[0]
	req, _ = http.NewRequestWithContext(t.Context(), "DELETE", a.srv.URL+"/v1/session", nil)
	req.AddCookie(second)
	req.Header.Set(httpapi.CSRFHeader, info.CSRFToken)
	if resp, err = http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("logout: %v %v", err, resp.StatusCode)
	}
	resp.Body.Close()
	if st := get(second); st != http.StatusUnauthorized {
		t.Fatalf("after the logout: %d, want 401", st)
	}
}

// TestHostileBodiesOnEveryRoute: every route that takes a body answers a
// huge one 413, bad JSON, two values and an unknown field 400, each with
// a JSON error — as the operator, whom NATS would let do each.
func TestHostileBodiesOnEveryRoute(t *testing.T) {
	a := startAPI(t, httpapi.Config{MaxBodyBytes: 64 << 10})
	op := a.login(t, "operator")
	fill := strings.NewReplacer("{id}", "r1", "{run}", "r1", "{key}", "k1", "{tool}", "add")
	for _, r := range httpapi.Routes(a.server) {
		if r[0] != "POST" {
			continue
		}
		path := fill.Replace(r[1])
		for _, tc := range []struct {
			name string
			body json.RawMessage
			want int
			code string
		}{
			{"huge", json.RawMessage(`{"reason": "` + strings.Repeat("x", 100<<10) + `"}`), http.StatusRequestEntityTooLarge, httpapi.CodeTooLarge},
			{"bad JSON", json.RawMessage(`{"reason": `), http.StatusBadRequest, httpapi.CodeBadRequest},
			{"two values", json.RawMessage(`{} {}`), http.StatusBadRequest, httpapi.CodeBadRequest},
			{"unknown field", json.RawMessage(`{"zzz": 1}`), http.StatusBadRequest, httpapi.CodeBadRequest},
		} {
			t.Run(path+" "+tc.name, func(t *testing.T) {
				req, _ := http.NewRequestWithContext(t.Context(), "POST", a.srv.URL+path, bytes.NewReader(tc.body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Origin", a.srv.URL)
				req.Header.Set(httpapi.CSRFHeader, op.csrf)
				resp, err := op.c.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				var e struct {
					Error struct{ Code, Message string }
				}
				if err := json.NewDecoder(resp.Body).Decode(&e); err != nil || resp.StatusCode != tc.want || e.Error.Code != tc.code {
					t.Fatalf("status %d code %q (%v), want %d %s", resp.StatusCode, e.Error.Code, err, tc.want, tc.code)
				}
			})
		}
	}
}
