package deploy

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/internal/approval"
	"github.com/toolfleet/toolfleet/internal/approvalproof"
	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natsbus/dispatch"
	"github.com/toolfleet/toolfleet/internal/natstest"
	"github.com/toolfleet/toolfleet/internal/testsync"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// The server answers a JetStream API request (a direct get, a message
// get) on the reply subject the requester named, with its own authority:
// past the requester's publish denies, and into any stream capturing that
// subject. A worker writes its catalog entries ($KV.fleet_tools.>) and
// reads them back, and may read the approvals stream by sequence (so it
// learns a pending request's run, key and digest). The attack: store a
// valid "approved" decision as a catalog entry, then ask the server for it
// with the reply subject fleet.approval.decision.<run>.<key>: the server
// stores its answer in the audit log, on the decision subject. A direct
// get's answer is the entry itself (asked with {"no_hdr":true}, the entry
// alone); a message get's is a JSON envelope around it.
//
// reflectDecision performs it as user worker, for the request stored at
// reqSeq, both ways: a direct get of the entry, with body as its request
// body (on a connection of its own, as worker, whose refusal it reports),
// and a message get with body's fields as well. It returns whether the
// server refused the direct get and the sequences of what the approvals
// stream stored on the decision subject since (read as admin), once the
// message get's answer is among them (or, were the message get refused,
// once anything is).
func reflectDecision(t *testing.T, s *server.Server, worker, admin client, reqSeq uint64, entry string, hdr nats.Header, body []byte) (directRefused bool, seqs []uint64) {
	t.Helper()
	ctx := t.Context()
	subjects := protocol.Subjects{}
	// The worker reads the pending request (allowed: proof checks).
	r, err := worker.nc.Request("$JS.API.DIRECT.GET.FLEET_APPROVALS", []byte(`{"seq":`+jsonUint(reqSeq)+`}`), 5*time.Second)
	if err != nil {
		t.Fatalf("worker: reading the request back: %v", err)
	}
	req, err := protocol.DecodeApprovalRequest(r.Data, 1<<20)
	if err != nil {
		t.Fatalf("worker: decoding the request: %v", err)
	}
	decSubj, _ := subjects.ApprovalDecision(req.RunID, req.CallKey)
	// The forged decision, as a catalog entry.
	yes := true
	forged, _ := json.Marshal(protocol.ApprovalDecision{V: 1, Digest: req.Digest, Approved: &yes, Approver: "mallory"})
	m := nats.NewMsg("$KV.fleet_tools." + entry)
	m.Data = forged
	for k, v := range hdr {
		m.Header[k] = v
	}
	if _, err := worker.js.PublishMsg(ctx, m); err != nil {
		t.Fatalf("worker: storing the catalog entry: %v", err)
	}
	before := lastSeqOf(t, admin, "FLEET_APPROVALS")

	direct := connectAs(t, s, "worker")
	get := nats.NewMsg("$JS.API.DIRECT.GET.KV_fleet_tools.$KV.fleet_tools." + entry)
	get.Reply = decSubj
	get.Data = body
	if err := direct.nc.PublishMsg(get); err != nil {
		t.Fatal(err)
	}
	directRefused = violated(t, direct, "Publish", get.Subject)

	fields := map[string]any{}
	if len(body) > 0 {
		if err := json.Unmarshal(body, &fields); err != nil {
			t.Fatal(err)
		}
	}
	fields["last_by_subj"] = "$KV.fleet_tools." + entry
	msgGet := nats.NewMsg("$JS.API.STREAM.MSG.GET.KV_fleet_tools")
	msgGet.Reply = decSubj
	msgGet.Data, _ = json.Marshal(fields)
	if err := worker.nc.PublishMsg(msgGet); err != nil {
		t.Fatal(err)
	}
	msgGetRefused := violated(t, worker, "Publish", msgGet.Subject)
	if msgGetRefused {
		t.Error("worker: the message get of its own catalog entry was refused")
	}
	testsync.WaitFor(t, 30*time.Second, func() error {
		seqs = seqs[:0]
		envelope := false
		for seq := before + 1; ; {
			m, err := storedNext(admin, "FLEET_APPROVALS", decSubj, seq)
			if err != nil {
				break
			}
			seqs = append(seqs, m.Seq)
			envelope = envelope || strings.Contains(string(m.Data), "stream_msg_get_response")
			seq = m.Seq + 1
		}
		if !envelope && !msgGetRefused {
			return errors.New("the message get's answer not stored yet")
		}
		if len(seqs) == 0 {
			return errors.New("nothing stored on the decision subject yet")
		}
		return nil
	})
	return directRefused, seqs
}

// storedMsg is a stored message as STREAM.MSG.GET reports it: its
// subject, sequence and time from the server, not from headers.
type storedMsg struct {
	Subject string    `json:"subject"`
	Seq     uint64    `json:"seq"`
	Time    time.Time `json:"time"`
	Hdrs    []byte    `json:"hdrs"`
	Data    []byte    `json:"data"`
}

// storedLast returns the last message stored on subj in stream, read with
// STREAM.MSG.GET (a direct get reports a message's stored Nats-Subject and
// Nats-Sequence headers, when it has them, in place of its own).
func storedLast(c client, stream, subj string) (storedMsg, error) {
	return storedGet(c, stream, `{"last_by_subj":"`+subj+`"}`)
}

// storedGet asks STREAM.MSG.GET of stream with the request req.
func storedGet(c client, stream, req string) (storedMsg, error) {
	r, err := c.nc.Request("$JS.API.STREAM.MSG.GET."+stream, []byte(req), 5*time.Second)
	if err != nil {
		return storedMsg{}, err
	}
	var resp struct {
		Message *storedMsg `json:"message"`
		Error   *struct {
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(r.Data, &resp); err != nil {
		return storedMsg{}, err
	}
	if resp.Message == nil {
		return storedMsg{}, errors.New("no message")
	}
	return *resp.Message, nil
}

// storedNext returns the first message stored on subj in stream at or
// after seq, read with STREAM.MSG.GET.
func storedNext(c client, stream, subj string, seq uint64) (storedMsg, error) {
	return storedGet(c, stream, `{"seq":`+jsonUint(seq)+`,"next_by_subj":"`+subj+`"}`)
}

func jsonUint(n uint64) string { b, _ := json.Marshal(n); return string(b) }

func lastSeqOf(t *testing.T, c client, stream string) uint64 {
	t.Helper()
	st, err := c.js.Stream(t.Context(), stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.LastSeq
}

// TestHostileReflectedDecision: with the shipped deploy/nats-server.conf,
// a worker tries to store an operator's "approved" decision in the audit
// log by having the server reflect its own catalog entry onto the decision
// subject (stored plain, asked with no_hdr, and stored with headers that
// imitate a direct get's). No stream a worker writes allows a direct get
// and no worker role may ask one: the server refuses the worker's direct
// get, and its message get lands a JSON envelope on the decision subject.
// Neither the coordinator's gate nor a worker's proof check takes what
// was stored for a decision: the gated call expires, and a call carrying
// it as its proof is refused.
func TestHostileReflectedDecision(t *testing.T) {
	t.Parallel()
	s := startFromConf(t)
	provision(t, s)
	admin := connectAs(t, s, "admin")
	subjects := protocol.Subjects{}
	if !refusedPub(t, connectAs(t, s, "worker"), "fleet.approval.decision.R.K") {
		t.Fatal("a worker may publish a decision itself")
	}
	// The streams workers write answer no direct get, whoever asks (the
	// coordinator's $JS.API.> included), and no worker role may ask one.
	for _, name := range []string{"KV_fleet_tools", "FLEET_CLAIMS", "KV_fleet_limits"} {
		st, err := admin.js.Stream(t.Context(), name)
		if err != nil {
			t.Fatal(err)
		}
		if st.CachedInfo().Config.AllowDirect {
			t.Errorf("%s allows direct gets: a worker writes its content", name)
		}
		for _, user := range []string{"worker", "worker_deploy"} {
			if !refusedPub(t, connectAs(t, s, user), "$JS.API.DIRECT.GET."+name+".x") {
				t.Errorf("%s may direct-get %s, whose content it writes", user, name)
			}
		}
		if !refusedPub(t, connectAs(t, s, "leaf"), "$JS.hub.API.DIRECT.GET."+name+".x") {
			t.Errorf("leaf may direct-get %s, whose content it writes", name)
		}
	}

	for _, tc := range []struct {
		name string
		hdr  nats.Header
		body []byte
	}{
		// A direct get's answer would carry the server's Nats-Stream,
		// -Subject, -Sequence, -Time-Stamp.
		{name: "with_headers"},
		// {"no_hdr":true}: a direct get's answer would be the entry's
		// payload alone, no header at all.
		{name: "no_headers", body: []byte(`{"no_hdr":true}`)},
		// Stored headers that a direct get of the audit log reports first:
		// the decision subject, a chosen sequence and time.
		{name: "imitated_headers", hdr: nats.Header{
			"Nats-Stream": {"FLEET_APPROVALS"}, "Nats-Subject": {"x"}, "Nats-Sequence": {"1"},
			"Nats-Time-Stamp": {time.Now().UTC().Format(time.RFC3339Nano)},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Each case waits out a gate's deadline, so they run at the
			// same time, each on a server of its own: imitated_headers
			// predicts the sequence its reflected copy gets, which another
			// case's writes to the audit log would change.
			t.Parallel()
			s := startFromConf(t)
			provision(t, s)
			admin := connectAs(t, s, "admin")
			coord := connectAs(t, s, "coordinator")
			worker := connectAs(t, s, "worker")
			ctx := t.Context()
			gate := approval.NewGate(coord.nc, coord.js, subjects, approval.GateConfig{Logger: zerolog.Nop()})
			run, key := protocol.NewRunID(), protocol.NewCallKey()
			args := json.RawMessage(`{"target":"prod"}`)
			deadline := time.Now().Add(15 * time.Second)
			type answer struct {
				d   loop.Decision
				err error
			}
			done := make(chan answer, 1)
			go func() {
				d, err := gate.Approve(ctx, protocol.ApprovalRequest{RunID: run, CallKey: key, Round: 1, Tool: "deploy",
					Arguments: args, Deadline: deadline})
				done <- answer{d, err}
			}()
			reqSubj, _ := subjects.ApprovalRequest(run, key)
			decSubj, _ := subjects.ApprovalDecision(run, key)
			var reqSeq uint64
			testsync.WaitFor(t, 30*time.Second, func() error {
				m, err := storedLast(admin, "FLEET_APPROVALS", reqSubj)
				reqSeq = m.Seq
				return err
			})
			hdr := tc.hdr
			if hdr != nil {
				hdr = nats.Header(http.Header(hdr).Clone())
				hdr.Set("Nats-Subject", decSubj)
				// the sequence the reflected copy will get
				hdr.Set("Nats-Sequence", jsonUint(lastSeqOf(t, admin, "FLEET_APPROVALS")+1))
			}
			directRefused, decSeqs := reflectDecision(t, s, worker, admin, reqSeq, "forged_"+tc.name, hdr, tc.body)
			if !directRefused {
				t.Error("the worker's direct get of its own catalog entry was not refused")
			}
			if m, err := storedLast(admin, "FLEET_APPROVALS", decSubj); err != nil || !m.Time.Before(deadline) {
				t.Fatalf("the reflected answer was not stored before the request's deadline (%v): cannot tell", err)
			}

			a := <-done
			if a.err != nil {
				t.Fatalf("gate: %v", a.err)
			}
			if a.d.Approved {
				t.Fatalf("the gate approved the call on a decision the server reflected (seqs %v)", decSeqs)
			}
			if !a.d.Expired {
				t.Fatalf("gate: %+v, want expired", a.d)
			}

			// A worker checking a call that names a reflected message as
			// its approval refuses it.
			wst, err := worker.js.Stream(ctx, "FLEET_APPROVALS")
			if err != nil {
				t.Fatal(err)
			}
			for _, decSeq := range decSeqs {
				call := protocol.Call{V: 1, RunID: run, Round: 1, CallKey: key, CallID: "c1", Tool: "deploy", Arguments: args,
					Deadline: time.Now().Add(time.Minute), Attempt: 1, RequiresApproval: true,
					Approval: &protocol.ApprovalProof{RequestSeq: reqSeq, DecisionSeq: decSeq}}
				if err := approvalproof.Verify(ctx, wst, subjects, call, natsbus.MaxApprovalMaxAge); err == nil {
					t.Fatalf("a worker accepts the reflected message %d as the call's approval", decSeq)
				}
			}
		})
	}
}

// TestHostileReflectedResult: a worker of another tool (the generic
// worker, denied fleet.result.*.deploy) stores an ok result of a published
// deploy call as its catalog entry and asks the server for it with the
// reply subject fleet.result.<run>.deploy. Its direct get is refused; its
// message get's answer, a JSON envelope, is stored in the results stream
// on deploy's subject, and the coordinator's inbox refuses it.
func TestHostileReflectedResult(t *testing.T) {
	t.Parallel()
	s := startFromConf(t)
	provision(t, s)
	admin := connectAs(t, s, "admin")
	coord := connectAs(t, s, "coordinator")
	worker := connectAs(t, s, "worker")
	subjects := protocol.Subjects{}
	if !refusedPub(t, connectAs(t, s, "worker"), "fleet.result.R.deploy") {
		t.Fatal("the generic worker may publish deploy's results itself")
	}
	ctx := t.Context()
	logs := natstest.NewLogBuffer(t)
	d := dispatch.NewDispatcher(coord.nc, coord.js, subjects, dispatch.DispatcherConfig{Logger: logs.Logger()})
	run := protocol.NewRunID()
	li, err := d.Open(ctx, run)
	if err != nil {
		t.Fatal(err)
	}
	defer li.Close()
	in := li.(*dispatch.Inbox)
	call := protocol.Call{V: 1, RunID: run, Round: 1, CallKey: protocol.NewCallKey(), CallID: "c1", Tool: "deploy",
		Arguments: json.RawMessage(`{}`), Deadline: time.Now().Add(10 * time.Minute), Attempt: 1}
	if err := d.Publish(ctx, loop.Outgoing{Call: call}); err != nil {
		t.Fatal(err)
	}
	data, _ := protocol.Encode(&protocol.Result{V: protocol.Version, RunID: run, CallKey: call.CallKey,
		Outcome: protocol.OutcomeOK, Output: "FORGED: deployed", Worker: "deployer", Attempt: 1})
	if _, err := worker.js.Publish(ctx, "$KV.fleet_tools.forged_result", data); err != nil {
		t.Fatal(err)
	}
	target, _ := subjects.Result(run, "deploy")
	direct := connectAs(t, s, "worker")
	get := nats.NewMsg("$JS.API.DIRECT.GET.KV_fleet_tools.$KV.fleet_tools.forged_result")
	get.Reply = target
	get.Data = []byte(`{"no_hdr":true}`)
	if err := direct.nc.PublishMsg(get); err != nil {
		t.Fatal(err)
	}
	if !violated(t, direct, "Publish", get.Subject) {
		t.Error("the worker may direct-get its own catalog entry")
	}
	msgGet := nats.NewMsg("$JS.API.STREAM.MSG.GET.KV_fleet_tools")
	msgGet.Reply = target
	msgGet.Data = []byte(`{"last_by_subj":"$KV.fleet_tools.forged_result"}`)
	if err := worker.nc.PublishMsg(msgGet); err != nil {
		t.Fatal(err)
	}
	testsync.WaitFor(t, 30*time.Second, func() error {
		_, err := storedLast(admin, "FLEET_RESULTS", target)
		return err
	})
	testsync.WaitFor(t, 30*time.Second, func() error {
		if !logs.Contains("dropped a malformed message") {
			return errors.New("the reflected result not refused yet")
		}
		return nil
	})
	select {
	case ev := <-in.Events():
		if ev.Result != nil {
			t.Fatalf("the inbox delivered the reflected result: %+v", *ev.Result)
		}
	default:
	}
}
