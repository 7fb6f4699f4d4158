package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// canary marks every hostile payload: it must never appear in a log, nor
// in the coordinator's result.
const canary = "CANARY-hostile-7d1e"

// TestHostileMessagesOnEverySubject publishes garbage, oversized,
// wrong-version and spoofed messages on every subject the fleet listens to
// — calls, results, progress, cancels, approval requests and decisions, the
// catalog — while a run is in flight. Nothing crashes; the run completes
// with every call answered as it should be and run once; every call
// message was stored once, and each malformed one was delivered once and
// terminated, never redelivered; the operator's approvals list still
// works; and no log holds the hostile content.
//
// The worker's ack wait is 10s, not the suite's 2s: a worker that neither
// settles a malformed call nor heartbeats a running one still shows (the
// consumer does not drain, or delivers again), but a loaded machine that
// stalls the worker for two seconds does not pass for one.
func TestHostileMessagesOnEverySubject(t *testing.T) {
	t.Parallel()
	f := newFleet(t)
	w := f.startWorker("w1", "--ack-wait", "10s")
	subjects := protocol.Subjects{}

	requests, err := f.nc.SubscribeSync(subjects.ApprovalRequests())
	if err != nil {
		t.Fatal(err)
	}
	// The run's first calls, as the coordinator publishes them (a core
	// subscription sees what is published into the calls stream).
	published, err := f.nc.SubscribeSync("fleet.call.>")
	if err != nil {
		t.Fatal(err)
	}
	coord := f.coordinator("coordinator", script{
		turn(
			call("c1", toolWork, map[string]any{"id": "h1", "sleep_ms": 2500}),
			call("c2", toolCharge, map[string]any{"id": "h2", "sleep_ms": 2500}),
		),
		turn(call("c3", "echo", map[string]any{"text": "approved text"})),
		turn(call("c4", toolWork, map[string]any{"id": "h4"})),
		final("done"),
	}, "--tool-timeout", "30s", "--require-approval", "echo", "--approval-timeout", "30s")

	// Round 1: two calls in flight.
	h1 := f.waitStarted("h1", 1, 15*time.Second)[0]
	f.waitStarted("h2", 1, 15*time.Second)
	run, keys := callKeys(t, published, 2)
	h := hostile{t: t, f: f}
	h.calls(run)
	h.results(run, keys[0])
	h.progress(run)
	h.cancels(run, keys)
	h.catalog()

	// Round 2: a call waits for approval.
	m, err := requests.NextMsg(15 * time.Second)
	if err != nil {
		t.Fatalf("no approval request: %v", err)
	}
	req, err := protocol.DecodeApprovalRequest(m.Data, 0)
	if err != nil || req.RunID != run {
		t.Fatalf("approval request %+v, %v; want one of run %s", req, err, run)
	}
	h.approvals(run, req)
	h.results(run, req.CallKey)
	h.cancels(run, []protocol.CallKey{req.CallKey})

	// Now the real decision: the call runs only if nothing above decided it.
	decision, _ := json.Marshal(map[string]any{"digest": req.Digest, "approved": true, "approver": "e2e"})
	if err := f.nc.Publish(req.DecisionSubject, decision); err != nil {
		t.Fatal(err)
	}

	res := coord.result(60*time.Second, 0)
	recs, obs := answered(t, res)
	for _, id := range []string{"c1", "c2", "c3", "c4"} {
		if recs[id].Outcome != protocol.OutcomeOK {
			t.Errorf("%s = %+v, want ok", id, recs[id])
		}
	}
	if obs["c3"] != "approved text" {
		t.Errorf("echo observation = %q, want the approved call's output", obs["c3"])
	}
	if res.Answer != "done" || res.TerminationReason != "natural" {
		t.Errorf("answer %q, termination %q", res.Answer, res.TerminationReason)
	}
	if r := f.runsOf("h1"); len(r) != 1 || !r[0].done || r[0].pid != h1.pid {
		t.Errorf("h1 runs = %+v: a hostile cancel must not have stopped it, nor anything rerun it", r)
	}
	if r := f.runsOf("h2"); len(r) != 1 || !r[0].done {
		t.Errorf("h2 runs = %+v: the non-idempotent call must have run once, to its end", r)
	}
	for _, r := range f.runs() {
		if strings.Contains(r.id, "spoof") {
			t.Errorf("a call with a spoofed reply subject ran: %+v", r)
		}
	}
	if w.exited() {
		t.Fatal("the worker died")
	}

	// Every call message, hostile or not, was stored once, delivered once
	// and settled. (A consumer's NumRedelivered counts only the messages
	// now awaiting redelivery, so it is 0 once drained whatever happened:
	// deliveries beyond the messages stored are the redeliveries.)
	legit := map[string]int{toolWork: 2, toolCharge: 1, "echo": 1}
	stored := 0
	for tool, published := range h.published {
		stored += published + legit[tool]
		f.waitDrained(tool, 10*time.Second)
		info := f.consumerInfo(tool)
		if want := uint64(published + legit[tool]); info.Delivered.Consumer != want {
			t.Errorf("consumer of %s: %d deliveries of %d calls stored; want each delivered once",
				tool, info.Delivered.Consumer, want)
		}
	}
	if got := f.callsStored(); got != uint64(stored) {
		t.Errorf("the calls stream stored %d messages, want %d: one per call published", got, stored)
	}

	// The operator's view copes with the garbage in the approvals stream.
	list := startProcEnv(t, "approvals-list", []string{"NATS_URL=" + f.url()}, bins.coordinator, "approvals", "list")
	if code := list.wait(30 * time.Second); code != 0 {
		t.Errorf("approvals list exited %d:\n%s", code, list.log())
	}

	for _, p := range []*proc{w, coord, list} {
		if strings.Contains(p.log(), canary) {
			t.Errorf("%s logged hostile content:\n%s", p.name, grepLines(p.log(), canary))
		}
		if strings.Contains(p.stdout.String(), canary) {
			t.Errorf("%s printed hostile content:\n%s", p.name, grepLines(p.stdout.String(), canary))
		}
	}
	if !strings.Contains(w.log(), "terminated a malformed call") || !strings.Contains(w.log(), "ignored a malformed cancel") {
		t.Error("the worker did not log its refusals")
	}
	if !strings.Contains(coord.log(), "dropped a malformed message") || !strings.Contains(coord.log(), "event_dropped") {
		t.Error("the coordinator did not log its refusals")
	}
}

// hostile publishes hostile messages and counts the call messages it
// stored per tool.
type hostile struct {
	t         *testing.T
	f         *fleet
	published map[string]int
}

// garbage payloads: not JSON, JSON of the wrong shape, and binary.
func garbage(tag string) [][]byte {
	return append(garbageValues(tag), []byte(`{"v":1,"`+canary+`":"`+tag+`"}`))
}

// garbageValues is garbage with the canary only in values, never in a JSON
// key: the operator's approvals list names unknown fields when it explains
// why it skipped a request.
func garbageValues(tag string) [][]byte {
	return [][]byte{
		[]byte(canary + " " + tag),
		[]byte(`{"v":1,"unknown":"` + canary + `"}`),
		[]byte(`["` + canary + `"]`),
		append([]byte("\x00\xff{\"v\":1,"), []byte(canary)...),
		[]byte(`{"v":1,"run_id":"` + canary + `"}` + "\n" + canary),
	}
}

// big is an oversized hostile payload of about n bytes.
func big(n int) []byte {
	return []byte(`{"v":1,"x":"` + strings.Repeat(canary, n/len(canary)) + `"}`)
}

func (h *hostile) stored(subject string, data []byte, hdr nats.Header) {
	h.t.Helper()
	msg := &nats.Msg{Subject: subject, Data: data, Header: hdr}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := h.f.js.PublishMsg(ctx, msg); err != nil {
		h.t.Fatalf("publishing to %s: %v", subject, err)
	}
}

func (h *hostile) core(subject string, data []byte) {
	h.t.Helper()
	if err := h.f.nc.Publish(subject, data); err != nil {
		h.t.Fatalf("publishing to %s: %v", subject, err)
	}
}

// calls stores hostile calls on every tool's call subject: each must be
// terminated unrun.
func (h *hostile) calls(run protocol.RunID) {
	h.published = map[string]int{}
	subjects := protocol.Subjects{}
	result, _ := subjects.Result(run, "echo")
	valid := func(tool protocol.ToolName, id string, deadline time.Time) protocol.Call {
		return protocol.Call{V: 1, RunID: run, Round: 1, CallKey: protocol.NewCallKey(), CallID: canary, Tool: tool,
			Arguments: json.RawMessage(`{"id":"` + id + `"}`), Deadline: deadline, Attempt: 1}
	}
	enc := func(c protocol.Call) []byte { b, _ := json.Marshal(c); return b }
	hdr := func(kv ...string) nats.Header {
		h := nats.Header{}
		for i := 0; i+1 < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		return h
	}
	soon := time.Now().Add(time.Minute)
	for _, tool := range []protocol.ToolName{toolWork, toolCharge, "echo"} {
		subject, _ := subjects.Call(tool, protocol.ClassInteractive, protocol.DefaultClient)
		var msgs []*nats.Msg
		for _, g := range garbage("call") {
			msgs = append(msgs, &nats.Msg{Data: g, Header: hdr(protocol.HeaderReplyTo, result)})
		}
		v2 := valid(tool, "spoof-v2", soon)
		v2.V = 2
		otherTool := valid(toolCharge, "spoof-tool", soon)
		if tool == toolCharge {
			otherTool.Tool = toolWork
		}
		msgs = append(msgs,
			&nats.Msg{Data: big(900 << 10), Header: hdr(protocol.HeaderReplyTo, result)},
			&nats.Msg{Data: enc(v2), Header: hdr(protocol.HeaderReplyTo, result)},
			&nats.Msg{Data: enc(valid(tool, "spoof-hv2", soon)), Header: hdr(protocol.HeaderReplyTo, result, protocol.HeaderVersion, "2")},
			&nats.Msg{Data: enc(valid(tool, "spoof-noreply", soon)), Header: hdr()},
			&nats.Msg{Data: enc(valid(tool, "spoof-reply", soon)), Header: hdr(protocol.HeaderReplyTo, "fleet.result.elsewhere")},
			&nats.Msg{Data: enc(valid(tool, "spoof-deadline", soon)), Header: hdr(protocol.HeaderReplyTo, result, protocol.HeaderDeadline, canary)},
			&nats.Msg{Data: enc(otherTool), Header: hdr(protocol.HeaderReplyTo, result)},
			&nats.Msg{Data: enc(valid(tool, "spoof-expired", time.Now().Add(-time.Minute))), Header: hdr(protocol.HeaderReplyTo, result)},
		)
		for _, m := range msgs {
			h.stored(subject, m.Data, m.Header)
			h.published[string(tool)]++
		}
	}
	// Beyond the stream's message size: refused before it is stored.
	subject, _ := subjects.Call(toolWork, protocol.ClassInteractive, protocol.DefaultClient)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := h.f.js.Publish(ctx, subject, big(2<<20)); err == nil {
		h.t.Fatal("a 2 MiB call was stored")
	}
}

// results publishes hostile results for the run: garbage, a wrong
// version, a result for a call key the run never made (carrying the canary
// as output), another run's result and outcomes no worker may report for
// an open call. None may answer a call.
func (h *hostile) results(run protocol.RunID, openKey protocol.CallKey) {
	subject, _ := protocol.Subjects{}.Result(run, "echo")
	result := func(mut func(*protocol.Result)) []byte {
		r := protocol.Result{V: 1, RunID: run, CallKey: protocol.NewCallKey(), Outcome: protocol.OutcomeOK, Output: canary}
		mut(&r)
		b, _ := json.Marshal(r)
		return b
	}
	payloads := append(garbage("result"),
		big(900<<10),
		result(func(r *protocol.Result) { r.V = 2 }),
		result(func(*protocol.Result) {}),
		result(func(r *protocol.Result) { r.RunID = "someoneelse" }),
		result(func(r *protocol.Result) { r.CallKey, r.Outcome = openKey, protocol.OutcomeApprovalExpired }),
		result(func(r *protocol.Result) { r.CallKey, r.Outcome = openKey, "approved" }),
	)
	for _, p := range payloads {
		h.stored(subject, p, nil)
	}
}

// progress publishes hostile progress notices for the run.
func (h *hostile) progress(run protocol.RunID) {
	subject, _ := protocol.Subjects{}.Started(run)
	for _, p := range append(garbage("progress"), big(900<<10),
		[]byte(`{"v":2,"run_id":"`+run+`","call_key":"k"}`),
		[]byte(`{"v":1,"run_id":"`+run+`","call_key":"unknownkey","worker":"`+canary+`"}`),
		[]byte(`{"v":1,"run_id":"otherrun","call_key":"k","worker":"`+canary+`"}`),
	) {
		h.core(subject, p)
	}
}

// cancels publishes hostile cancels for the run's open calls: garbage, an
// oversized one, a wrong version, one whose body names another call, and
// cancels of these calls on another call's subject. None may cancel
// anything.
func (h *hostile) cancels(run protocol.RunID, keys []protocol.CallKey) {
	subjects := protocol.Subjects{}
	for _, key := range keys {
		subject, _ := subjects.Cancel(run, key)
		for _, p := range append(garbage("cancel"), big(100<<10),
			[]byte(`{"v":2,"run_id":"`+string(run)+`","call_key":"`+string(key)+`","reason":"`+canary+`"}`),
			[]byte(`{"v":1,"run_id":"`+string(run)+`","call_key":"someotherkey","reason":"`+canary+`"}`),
		) {
			h.core(subject, p)
		}
	}
	// A well-formed cancel of an open call, published on another call's
	// subject: whoever may publish there may not cancel that call.
	other, _ := subjects.Cancel(run, "someotherkey")
	for _, key := range keys {
		h.core(other, []byte(`{"v":1,"run_id":"`+string(run)+`","call_key":"`+string(key)+`","reason":"`+canary+`"}`))
	}
	h.core("fleet.cancel.x", []byte(canary))
}

// callKeys returns the run and the call keys of the first n distinct calls
// sub receives.
func callKeys(t *testing.T, sub *nats.Subscription, n int) (protocol.RunID, []protocol.CallKey) {
	t.Helper()
	var run protocol.RunID
	seen := map[protocol.CallKey]bool{}
	var keys []protocol.CallKey
	deadline := time.Now().Add(15 * time.Second)
	for len(keys) < n {
		m, err := sub.NextMsg(time.Until(deadline))
		if err != nil {
			t.Fatalf("%d calls published, want %d: %v", len(keys), n, err)
		}
		c, err := protocol.DecodeCall(m.Data, 0)
		if err != nil || seen[c.CallKey] || (run != "" && c.RunID != run) {
			continue
		}
		run = c.RunID
		seen[c.CallKey] = true
		keys = append(keys, c.CallKey)
	}
	return run, keys
}

// approvals publishes hostile approval requests (into the audit stream) and
// decisions for the run's pending approval: garbage, oversized, a wrong
// version, a wrong digest, "yes" for approved, and none of them may decide
// it.
func (h *hostile) approvals(run protocol.RunID, req protocol.ApprovalRequest) {
	subjects := protocol.Subjects{}
	reqSubject, _ := subjects.ApprovalRequest(run, "forgedkey")
	for _, p := range append(garbageValues("approval-request"), big(900<<10),
		[]byte(`{"v":2,"run_id":"`+run+`","call_key":"forgedkey","tool":"echo","arguments":{"text":"`+canary+`"}}`),
	) {
		h.stored(reqSubject, p, nil)
	}
	for _, p := range append(garbage("decision"), big(100<<10),
		[]byte(`{"v":2,"digest":"`+req.Digest+`","approved":false,"reason":"`+canary+`"}`),
		[]byte(`{"digest":"`+strings.Repeat("0", 64)+`","approved":false,"reason":"`+canary+`"}`),
		[]byte(`{"digest":"`+req.Digest+`","approved":"yes","reason":"`+canary+`"}`),
		[]byte(`{"digest":"`+req.Digest+`","reason":"`+canary+`"}`),
		[]byte(`{"digest":"`+req.Digest+`","approved":false,"reason":"`+strings.Repeat(canary, 100)+`"}`),
	) {
		h.core(req.DecisionSubject, p)
	}
}

// catalog puts hostile entries into the catalog bucket under new keys.
func (h *hostile) catalog() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	kv, err := h.f.js.KeyValue(ctx, protocol.Subjects{}.CatalogBucket())
	if err != nil {
		h.t.Fatal(err)
	}
	spec := func(name protocol.ToolName, params string) []byte {
		digest, _ := protocol.SchemaDigest([]byte(params))
		b, _ := json.Marshal(protocol.ToolSpec{V: 1, Name: name, Description: canary,
			Parameters: json.RawMessage(params), SchemaDigest: digest})
		return b
	}
	entries := map[string][]byte{
		"evil-garbage":  []byte(canary),
		"evil-mismatch": spec("other", `{"type":"object"}`),
		"evil-version":  []byte(`{"v":2,"name":"evil-version","parameters":{},"schema_digest":"` + canary + `"}`),
		"evil-digest":   []byte(`{"v":1,"name":"evil-digest","description":"` + canary + `","parameters":{"type":"object"},"schema_digest":"` + canary + `"}`),
		"evil-schema":   spec("evil-schema", `{"type":"object","properties":{"a":{"$ref":"https://example.com/`+canary+`"}}}`),
	}
	for k, v := range entries {
		if _, err := kv.Put(ctx, k, v); err != nil {
			h.t.Fatalf("catalog put %s: %v", k, err)
		}
	}
	if _, err := kv.Put(ctx, "evil-big", big(2<<20)); err == nil {
		h.t.Fatal("a 2 MiB catalog entry was stored")
	}
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return tail(strings.Join(out, "\n"), 4000)
}
