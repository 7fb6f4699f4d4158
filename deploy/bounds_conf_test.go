package deploy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natsbus/dispatch"
	"github.com/toolfleet/toolfleet/internal/natsbus/workerbus"
	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// Bounds small enough that a test's flood reaches them in a moment,
// provisioned through the same code path as the defaults.
const (
	testMaxClaims      = 500
	testStartsMaxBytes = 64 << 10
	floodRecords       = 2_000
	// JetStream's error codes: a store refused (the stream's limits, with
	// discard new), a per-message TTL on a stream that takes none.
	errCodeStoreFailed jetstream.ErrorCode = 10077
	errCodeTTLDisabled jetstream.ErrorCode = 10166
)

// boundedFleet starts a server from the shipped conf and provisions it as
// "coordinator provision --tool-consumer deploy" does, with small record
// bounds; it returns the admin's and worker_deploy's connections.
func boundedFleet(t *testing.T) (s serverOf, admin, deploy client) {
	t.Helper()
	srv := startFromConf(t)
	admin = connectAs(t, srv, "admin")
	cfg := natsbus.StreamConfig{OwnRecordTools: []string{"deploy"}, MaxClaims: testMaxClaims, StartsMaxBytes: testStartsMaxBytes}
	if _, err := natsbus.Provision(t.Context(), admin.js, protocol.Subjects{}, cfg); err != nil {
		t.Fatalf("admin provisioning the fleet: %v", err)
	}
	if _, err := workerbus.ProvisionToolConsumers(t.Context(), admin.js, protocol.Subjects{}, []string{"deploy"}); err != nil {
		t.Fatalf("provisioning deploy's consumer: %v", err)
	}
	return serverOf{srv}, admin, connectAs(t, srv, "worker_deploy")
}

// flood publishes n records on subject(i) as c, as fast as core NATS
// takes them, each with hdr, and waits until the server has read them.
func flood(t *testing.T, c client, n int, hdr nats.Header, subject func(i int) string) {
	t.Helper()
	for i := range n {
		msg := &nats.Msg{Subject: subject(i), Data: []byte(`{"v":1,"worker":"x","nonce":"n"}`), Header: hdr}
		if err := c.nc.PublishMsg(msg); err != nil {
			t.Fatalf("flood: %v", err)
		}
	}
	if err := c.nc.FlushTimeout(30 * time.Second); err != nil {
		t.Fatalf("flood: flush: %v", err)
	}
}

// msgsIn is the number of messages stream holds.
func msgsIn(t *testing.T, c client, stream string) uint64 {
	t.Helper()
	// A server still storing a flood answers slowly.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	st, err := c.js.Stream(ctx, stream)
	if err != nil {
		t.Fatalf("stream %s: %v", stream, err)
	}
	return st.CachedInfo().State.Msgs
}

// refusedFull reports whether the server refuses one more record on
// subject of stream as c because the stream is full (its limits), after
// everything c sent before it (one connection, in order).
func refusedFull(t *testing.T, c client, stream, subject string) bool {
	t.Helper()
	msg := nats.NewMsg(subject)
	msg.Data = []byte(`{"v":1,"worker":"x","nonce":"last"}`)
	_, err := c.js.PublishMsg(t.Context(), msg, jetstream.WithExpectStream(stream))
	var api *jetstream.APIError
	return errors.As(err, &api) && api.ErrorCode == errCodeStoreFailed
}

// otherToolsFleet runs, as the shared worker user, a gated tool "release"
// and a non-idempotent tool "charge" (toolsFleet).
func otherToolsFleet(t *testing.T, connect func(user string) client) func(tool protocol.ToolName) protocol.Result {
	t.Helper()
	return toolsFleet(t, connect, "worker",
		harness.Tool{Name: "release", Parameters: json.RawMessage(`{"type":"object"}`), RequiresApproval: true, Idempotent: true,
			Run: func(context.Context, json.RawMessage) (string, error) { return "released", nil }},
		harness.Tool{Name: "charge", Parameters: json.RawMessage(`{"type":"object"}`),
			Run: func(context.Context, json.RawMessage) (string, error) { return "charged", nil }})
}

// toolsFleet runs tools in a worker connected as user, and returns a
// function that publishes a call of one of them as the coordinator (for
// a tool that requires approval, with its approval, stored by the
// coordinator and the operator as the gate does) and waits for its
// result. connect connects to the fleet's server as a user.
func toolsFleet(t *testing.T, connect func(user string) client, user string, tools ...harness.Tool) func(tool protocol.ToolName) protocol.Result {
	t.Helper()
	subjects := protocol.Subjects{}
	gated := map[protocol.ToolName]bool{}
	for _, tool := range tools {
		gated[protocol.ToolName(tool.Name)] = tool.RequiresApproval
	}
	h, err := harness.New(harness.Config{}, tools...)
	if err != nil {
		t.Fatal(err)
	}
	worker := connect(user)
	cfg := workerbus.WorkerConfig{Name: user, PollWait: 200 * time.Millisecond, ShutdownGrace: time.Second, NoDiscovery: true}
	if user == "worker" {
		// A worker in an account of its own serves its provisioned
		// consumer's ack wait, the default.
		cfg.AckWait = 2 * time.Second
	}
	w, err := workerbus.NewWorker(worker.nc, worker.js, subjects, h, cfg)
	if err != nil {
		t.Fatalf("NewWorker: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("worker: Run: %v", err)
		}
	})
	coord := connect("coordinator")
	operator := connect("operator")
	d := dispatch.NewDispatcher(coord.nc, coord.js, subjects, dispatch.DispatcherConfig{})
	return func(tool protocol.ToolName) protocol.Result {
		t.Helper()
		run := protocol.NewRunID()
		in, err := d.Open(t.Context(), run)
		if err != nil {
			t.Fatal(err)
		}
		defer in.Close()
		call := protocol.Call{V: 1, RunID: run, Round: 1, CallKey: protocol.NewCallKey(), CallID: "c1", Tool: tool,
			Arguments: json.RawMessage(`{}`), Deadline: time.Now().Add(time.Minute), Attempt: 1}
		if gated[tool] {
			call.RequiresApproval = true
			digest, _ := protocol.Digest(run, call.CallKey, call.Tool, call.Arguments)
			reqSubj, _ := subjects.ApprovalRequest(run, call.CallKey)
			decSubj, _ := subjects.ApprovalDecision(run, call.CallKey)
			req, _ := protocol.Encode(&protocol.ApprovalRequest{V: 1, RunID: run, CallKey: call.CallKey, Round: 1, Tool: call.Tool,
				Arguments: call.Arguments, Digest: digest, Deadline: time.Now().Add(time.Minute), DecisionSubject: decSubj})
			reqAck, err := coord.js.Publish(t.Context(), reqSubj, req)
			if err != nil {
				t.Fatalf("coordinator: storing the request: %v", err)
			}
			decAck, err := operator.js.Publish(t.Context(), decSubj, []byte(`{"digest":"`+digest+`","approved":true,"approver":"alice"}`))
			if err != nil {
				t.Fatalf("operator: storing the decision: %v", err)
			}
			call.Approval = &protocol.ApprovalProof{RequestSeq: reqAck.Sequence, DecisionSeq: decAck.Sequence}
		}
		if err := d.Publish(t.Context(), loop.Outgoing{Call: call}); err != nil {
			t.Fatalf("Publish: %v", err)
		}
		return nextResultOf(t, in, call.CallKey)
	}
}

// serverOf names the server a test started.
type serverOf struct{ *server.Server }

// connect returns a function that connects to s as a user.
func (s serverOf) connect(t *testing.T) func(user string) client {
	return func(user string) client { return connectAs(t, s.Server, user) }
}

// TestHostileClaimsFloodFillsOnlyItsTool is attack 5 of issue 34, with
// the credential of one tool's workers (worker_deploy) and only its own
// tool's subjects: execution records flooded on
// fleet.claim.deploy.<x>.<y> are refused by the server (deploy's records
// live in FLEET_CLAIMS_deploy), and a flood of deploy's own record
// subject fills FLEET_CLAIMS_deploy to its bound and nothing else: an
// operator-approved call of another tool still runs.
func TestHostileClaimsFloodFillsOnlyItsTool(t *testing.T) {
	t.Parallel()
	s, admin, wd := boundedFleet(t)
	subjects := protocol.Subjects{}
	call := otherToolsFleet(t, s.connect(t))

	flood(t, wd, floodRecords, nil, func(i int) string { return fmt.Sprintf("fleet.claim.deploy.x%d.y%d", i, i) })
	if !refusedPub(t, wd, "fleet.claim.deploy.x.y") {
		t.Error("worker_deploy may write fleet.claim.deploy.>, the shared execution records")
	}
	if n := msgsIn(t, admin, subjects.ClaimsStream()); n != 0 {
		t.Errorf("the shared claims stream holds %d of worker_deploy's records, want 0", n)
	}
	flood(t, wd, floodRecords, nil, func(i int) string { return fmt.Sprintf("fleet.own.deploy.claim.x%d.y%d", i, i) })
	own := subjects.OwnClaimsStream("deploy")
	if !refusedFull(t, wd, own, "fleet.own.deploy.claim.x.last") {
		t.Fatalf("%s is not full after %d records (%d stored)", own, floodRecords, msgsIn(t, admin, own))
	}
	if n := msgsIn(t, admin, own); n != testMaxClaims {
		t.Errorf("%s holds %d records, want its bound %d", own, n, testMaxClaims)
	}

	if res := call("release"); res.Outcome != protocol.OutcomeOK {
		t.Fatalf("an approved call of another tool after the flood: %s (%s), want ok", res.Outcome, res.ErrorType)
	}
}

// TestHostileStartsFloodFillsOnlyItsTool is attack 6 of issue 34, with
// worker_deploy's credential: start records on fleet.start.deploy.<x>.<y>
// with Nats-TTL: never are refused (deploy's records live in
// FLEET_STARTS_deploy); there, a record with any TTL, never included, is
// refused by the server (the stream takes none: every record lives its
// MaxAge); a flood fills FLEET_STARTS_deploy to its bound and nothing
// else: a non-idempotent call of another tool still runs.
func TestHostileStartsFloodFillsOnlyItsTool(t *testing.T) {
	t.Parallel()
	s, admin, wd := boundedFleet(t)
	subjects := protocol.Subjects{}
	call := otherToolsFleet(t, s.connect(t))

	never := nats.Header{}
	never.Set(jetstream.MsgTTLHeader, "never")
	flood(t, wd, floodRecords, never, func(i int) string { return fmt.Sprintf("fleet.start.deploy.x%d.y%d", i, i) })
	if !refusedPub(t, wd, "fleet.start.deploy.x.y") {
		t.Error("worker_deploy may write fleet.start.deploy.>, the shared start records")
	}
	if n := msgsIn(t, admin, subjects.StartsStream()); n != 0 {
		t.Errorf("the shared starts stream holds %d of worker_deploy's records, want 0", n)
	}
	own := subjects.OwnStartsStream("deploy")
	for _, ttl := range []string{"never", "1h", "86400"} {
		msg := nats.NewMsg("fleet.own.deploy.start.ttl.x")
		msg.Data = []byte(`{"v":1,"worker":"x","nonce":"n"}`)
		msg.Header.Set(jetstream.MsgTTLHeader, ttl)
		_, err := wd.js.PublishMsg(t.Context(), msg, jetstream.WithExpectStream(own))
		var api *jetstream.APIError
		if !errors.As(err, &api) || api.ErrorCode != errCodeTTLDisabled {
			t.Errorf("a start record with Nats-TTL %s: %v, want refused (per-message TTL disabled)", ttl, err)
		}
	}
	flood(t, wd, floodRecords, never, func(i int) string { return fmt.Sprintf("fleet.own.deploy.start.x%d.y%d", i, i) })
	if n := msgsIn(t, admin, own); n != 0 {
		t.Errorf("%s stored %d records with Nats-TTL never, want none", own, n)
	}
	flood(t, wd, floodRecords, nil, func(i int) string { return fmt.Sprintf("fleet.own.deploy.start.x%d.y%d", i, i) })
	if !refusedFull(t, wd, own, "fleet.own.deploy.start.x.last") {
		t.Fatalf("%s is not full after %d records (%d stored)", own, floodRecords, msgsIn(t, admin, own))
	}

	if res := call("charge"); res.Outcome != protocol.OutcomeOK {
		t.Fatalf("a non-idempotent call of another tool after the flood: %s (%s), want ok", res.Outcome, res.ErrorType)
	}
}

// TestHostileSharedWorkerStartsFloodSparesOwnTools is attack 6 of issue
// 34 by the shared worker user: a start record with Nats-TTL: never, or
// 1000h, on a shared tool's subject is refused by the server (FLEET_STARTS
// takes no per-message TTL: every record lives its MaxAge), and a flood of
// them stores nothing; a non-idempotent call of a shared tool runs, once.
// A flood without TTL fills FLEET_STARTS (its records age out with its
// MaxAge), which stops the shared tools' non-idempotent calls, which the
// shared worker serves and is trusted with; a tool with workers of its own
// keeps its records in its own stream: deploy's non-idempotent call,
// served by worker_deploy, still runs.
func TestHostileSharedWorkerStartsFloodSparesOwnTools(t *testing.T) {
	t.Parallel()
	s, admin, _ := boundedFleet(t)
	subjects := protocol.Subjects{}
	var charged atomic.Int64
	call := toolsFleet(t, s.connect(t), "worker",
		harness.Tool{Name: "charge", Parameters: json.RawMessage(`{"type":"object"}`),
			Run: func(context.Context, json.RawMessage) (string, error) { charged.Add(1); return "charged", nil }})
	callDeploy := toolsFleet(t, s.connect(t), "worker_deploy", harness.Tool{Name: "deploy", Parameters: json.RawMessage(`{"type":"object"}`),
		Run: func(context.Context, json.RawMessage) (string, error) { return "deployed", nil }})

	worker := connectAs(t, s.Server, "worker")
	for _, ttl := range []string{"never", "1000h"} {
		msg := nats.NewMsg("fleet.start.charge.ttl.x")
		msg.Data = []byte(`{"v":1,"worker":"x","nonce":"n"}`)
		msg.Header.Set(jetstream.MsgTTLHeader, ttl)
		_, err := worker.js.PublishMsg(t.Context(), msg, jetstream.WithExpectStream(subjects.StartsStream()))
		var api *jetstream.APIError
		if !errors.As(err, &api) || api.ErrorCode != errCodeTTLDisabled {
			t.Errorf("the shared worker's start record with Nats-TTL %s: %v, want refused (per-message TTL disabled)", ttl, err)
		}
	}
	never := nats.Header{}
	never.Set(jetstream.MsgTTLHeader, "never")
	flood(t, worker, floodRecords, never, func(i int) string { return fmt.Sprintf("fleet.start.charge.x%d.y%d", i, i) })
	if n := msgsIn(t, admin, subjects.StartsStream()); n != 0 {
		t.Fatalf("%s stored %d records with Nats-TTL never, want none", subjects.StartsStream(), n)
	}
	if res := call("charge"); res.Outcome != protocol.OutcomeOK || charged.Load() != 1 {
		t.Fatalf("a non-idempotent call of charge: %s (%s), ran %d times; want ok, once", res.Outcome, res.ErrorType, charged.Load())
	}
	if n := msgsIn(t, admin, subjects.StartsStream()); n != 1 {
		t.Errorf("%s holds %d records after charge's call, want its one start record", subjects.StartsStream(), n)
	}

	flood(t, worker, floodRecords, nil, func(i int) string { return fmt.Sprintf("fleet.start.charge.x%d.y%d", i, i) })
	if !refusedFull(t, worker, subjects.StartsStream(), "fleet.start.charge.x.last") {
		t.Fatalf("%s is not full after %d records (%d stored)", subjects.StartsStream(), floodRecords, msgsIn(t, admin, subjects.StartsStream()))
	}
	if res := callDeploy("deploy"); res.Outcome != protocol.OutcomeOK {
		t.Fatalf("a non-idempotent call of deploy after the shared worker's flood: %s (%s), want ok", res.Outcome, res.ErrorType)
	}
	if n := msgsIn(t, admin, subjects.OwnStartsStream("deploy")); n != 1 {
		t.Errorf("%s holds %d records after deploy's call, want its one start record", subjects.OwnStartsStream("deploy"), n)
	}
}
