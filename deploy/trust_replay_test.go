package deploy

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/natsbus/dispatch"
	"github.com/toolfleet/toolfleet/internal/natsbus/workerbus"
	"github.com/toolfleet/toolfleet/internal/testsync"
	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// startDeployWorker runs a worker of the gated, non-idempotent tool
// "deploy" as user worker_deploy (a fresh connection: a fresh replica)
// until stop, counting the tool's executions in runs.
func startDeployWorker(t *testing.T, c client, name string, runs *atomic.Int64) (w *workerbus.Worker, stop func()) {
	t.Helper()
	h, err := harness.New(harness.Config{}, harness.Tool{
		Name: "deploy", Parameters: json.RawMessage(`{"type":"object"}`), RequiresApproval: true,
		Run: func(context.Context, json.RawMessage) (string, error) { runs.Add(1); return "deployed", nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	w, err = workerbus.NewWorker(c.nc, c.js, protocol.Subjects{}, h, workerbus.WorkerConfig{
		Name: name, PollWait: 200 * time.Millisecond, ShutdownGrace: time.Second, NoDiscovery: true,
	})
	if err != nil {
		t.Fatalf("NewWorker: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("worker %s: Run: %v", name, err)
		}
	}
	t.Cleanup(stop)
	return w, stop
}

// H2 of the second trust review, as it was shown: with the coordinator's
// credential, a program reads an approved call's request and decision
// from the approvals stream, rebuilds the call with that proof and
// publishes copies under new Nats-Msg-Ids — to the worker that ran it,
// to another, and to fresh replicas started after it ran. Under the
// shipped deploy/nats-server.conf the approval buys exactly one
// execution: every copy is refused as replayed.
func TestHostileApprovalReplayRunsOnce(t *testing.T) {
	t.Parallel()
	s := startFromConf(t)
	provision(t, s)
	admin := connectAs(t, s, "admin")
	subjects := protocol.Subjects{}
	if _, err := workerbus.ProvisionToolConsumers(t.Context(), admin.js, subjects, []string{"deploy"}); err != nil {
		t.Fatalf("provisioning deploy's consumer: %v", err)
	}
	coord := connectAs(t, s, "coordinator")
	operator := connectAs(t, s, "operator")

	var runs atomic.Int64
	w1, stop1 := startDeployWorker(t, connectAs(t, s, "worker_deploy"), "w1", &runs)
	w2, stop2 := startDeployWorker(t, connectAs(t, s, "worker_deploy"), "w2", &runs)

	d := dispatch.NewDispatcher(coord.nc, coord.js, subjects, dispatch.DispatcherConfig{})
	run := protocol.NewRunID()
	in, err := d.Open(t.Context(), run)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()

	// One approval, as the coordinator's gate and an operator store it.
	call := protocol.Call{V: 1, RunID: run, Round: 1, CallKey: protocol.NewCallKey(), CallID: "c1", Tool: "deploy",
		Arguments: json.RawMessage(`{"target":"prod"}`), Deadline: time.Now().Add(10 * time.Minute), Attempt: 1,
		RequiresApproval: true}
	digest, _ := protocol.Digest(run, call.CallKey, call.Tool, call.Arguments)
	reqSubj, _ := subjects.ApprovalRequest(run, call.CallKey)
	decSubj, _ := subjects.ApprovalDecision(run, call.CallKey)
	req, _ := protocol.Encode(&protocol.ApprovalRequest{V: 1, RunID: run, CallKey: call.CallKey, Round: 1, Tool: call.Tool,
		Arguments: call.Arguments, Digest: digest, Deadline: time.Now().Add(5 * time.Minute), DecisionSubject: decSubj})
	reqAck, err := coord.js.Publish(t.Context(), reqSubj, req)
	if err != nil {
		t.Fatalf("coordinator: storing the request: %v", err)
	}
	decAck, err := operator.js.Publish(t.Context(), decSubj, []byte(`{"digest":"`+digest+`","approved":true,"approver":"alice"}`))
	if err != nil {
		t.Fatalf("operator: storing the decision: %v", err)
	}
	call.Approval = &protocol.ApprovalProof{RequestSeq: reqAck.Sequence, DecisionSeq: decAck.Sequence}
	if err := d.Publish(t.Context(), loop.Outgoing{Call: call}); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	res := nextResultOf(t, in, call.CallKey)
	if res.Outcome != protocol.OutcomeOK || runs.Load() != 1 {
		t.Fatalf("the approved call: %+v, %d runs; want ok, 1", res, runs.Load())
	}

	// The replay: copies under fresh message ids, to w1 and w2 ...
	unapproved := func(ws ...*workerbus.Worker) int64 {
		var n int64
		for _, w := range ws {
			st, _ := w.ToolStats("deploy") // the worker's micro STATS data
			n += st.Unapproved
		}
		return n
	}
	for range 4 {
		republishCall(t, coord, call)
	}
	testsync.WaitFor(t, 60*time.Second, func() error { return want(unapproved(w1, w2), 4, "copies refused by w1 and w2") })
	// ... and to fresh replicas, the others gone.
	stop1()
	stop2()
	w3, _ := startDeployWorker(t, connectAs(t, s, "worker_deploy"), "w3", &runs)
	w4, _ := startDeployWorker(t, connectAs(t, s, "worker_deploy"), "w4", &runs)
	for range 4 {
		republishCall(t, coord, call)
	}
	testsync.WaitFor(t, 60*time.Second, func() error { return want(unapproved(w3, w4), 4, "copies refused by fresh replicas") })
	if n := runs.Load(); n != 1 {
		t.Fatalf("one approval ran the call %d times, want 1", n)
	}

	// Nobody but deploy's workers writes deploy's execution records, and
	// nobody removes one.
	claim, _ := subjects.Claim("deploy", run, call.CallKey)
	for _, user := range []string{"coordinator", "worker", "operator", "client"} {
		if !refusedPub(t, connectAs(t, s, user), claim) {
			t.Errorf("%s: publish on %s not refused", user, claim)
		}
	}
	st, err := admin.js.Stream(t.Context(), subjects.ClaimsStream())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Purge(t.Context()); err == nil {
		t.Error("admin purged the execution records")
	}
	if err := st.DeleteMsg(t.Context(), 1); err == nil {
		t.Error("admin removed an execution record")
	}
}

// want is nil when got is n, or an error saying what.
func want(got, n int64, what string) error {
	if got != n {
		return fmt.Errorf("%s: %d, want %d", what, got, n)
	}
	return nil
}

// republishCall stores a copy of call on its tool's subject, as the
// dispatcher does, under a fresh Nats-Msg-Id.
func republishCall(t *testing.T, c client, call protocol.Call) {
	t.Helper()
	subjects := protocol.Subjects{}
	subject, _ := subjects.Call(call.Tool, protocol.ClassInteractive, protocol.DefaultClient)
	replyTo, _ := subjects.Result(call.RunID, call.Tool)
	data, err := protocol.Encode(&call)
	if err != nil {
		t.Fatal(err)
	}
	msg := nats.NewMsg(subject)
	msg.Data = data
	msg.Header.Set(protocol.HeaderMsgID, "replay-"+protocol.NewID())
	msg.Header.Set(protocol.HeaderReplyTo, replyTo)
	if _, err := c.js.PublishMsg(t.Context(), msg, jetstream.WithExpectStream(subjects.CallsStream())); err != nil {
		t.Fatalf("republishing the call: %v", err)
	}
}

// nextResultOf reads in until the result for key arrives (bounded).
func nextResultOf(t *testing.T, in interface {
	Events() <-chan loop.Event
}, key protocol.CallKey) protocol.Result {
	t.Helper()
	timeout := time.After(60 * time.Second)
	for {
		select {
		case ev, ok := <-in.Events():
			if !ok {
				t.Fatal("inbox closed")
			}
			if ev.Result != nil && ev.Result.CallKey == key {
				return *ev.Result
			}
		case <-timeout:
			t.Fatalf("no result for %s", key)
		}
	}
}
