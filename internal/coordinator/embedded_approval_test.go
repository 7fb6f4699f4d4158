package coordinator_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/internal/coordinator"
	"github.com/toolfleet/toolfleet/internal/natsbus/dispatch"
	"github.com/toolfleet/toolfleet/internal/testsync"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/model/scripted"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// On a listening embedded server the in-process workers share the
// coordinator's connection, whose role may write execution records: a
// call the operator approved runs, once; published with that very
// connection, a call with no approval or with a proof that points at
// another call's approved request is refused (denied), and a copy of the
// approved call is refused as a replay and does not run again.
func TestEmbeddedInProcessWorkersRunApprovedCallsOnly(t *testing.T) {
	t.Setenv("NATS_URL", "")
	const operatorPassword = "tf-test-embedded-operator"
	t.Setenv("TOOLFLEET_OPERATOR_PASSWORD", operatorPassword)
	var log testsync.Buffer
	model, err := scripted.Parse([]byte(`{"turns": [{"content": "unused"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	c, err := coordinator.Open(t.Context(), coordinator.Config{
		Model: model, StoreDir: t.TempDir(), Listen: "127.0.0.1:0", Builtins: []string{"calculator"},
		Logger: zerolog.New(zerolog.MultiLevelWriter(zerolog.NewTestWriter(t), &log)).Level(zerolog.InfoLevel),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	js, err := jetstream.New(c.Conn())
	if err != nil {
		t.Fatal(err)
	}
	op, err := nats.Connect(c.ClientURL(), nats.UserInfo("operator", operatorPassword), nats.CustomInboxPrefix("_INBOX_operator"))
	if err != nil {
		t.Fatal(err)
	}
	defer op.Close()
	opjs, _ := jetstream.New(op)

	subjects := protocol.Subjects{}
	d := dispatch.NewDispatcher(c.Conn(), js, subjects, dispatch.DispatcherConfig{})
	run := protocol.NewRunID()
	in, err := d.Open(t.Context(), run)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	args := json.RawMessage(`{"expression":"6 * 7"}`)
	// approve stores key's approval request (as the coordinator) and the
	// operator's decision approving it, and returns the proof.
	approve := func(key protocol.CallKey) *protocol.ApprovalProof {
		digest, _ := protocol.Digest(run, key, "calculator", args)
		reqSubj, _ := subjects.ApprovalRequest(run, key)
		decSubj, _ := subjects.ApprovalDecision(run, key)
		data, _ := protocol.Encode(&protocol.ApprovalRequest{V: 1, RunID: run, CallKey: key, Round: 1, Tool: "calculator",
			Arguments: args, Digest: digest, Deadline: time.Now().Add(time.Minute), DecisionSubject: decSubj})
		req, err := js.Publish(t.Context(), reqSubj, data)
		if err != nil {
			t.Fatalf("storing the request: %v", err)
		}
		yes := true
		data, _ = json.Marshal(protocol.ApprovalDecision{V: 1, Digest: digest, Approved: &yes, Approver: "operator"})
		dec, err := opjs.Publish(t.Context(), decSubj, data)
		if err != nil {
			t.Fatalf("storing the operator's decision: %v", err)
		}
		return &protocol.ApprovalProof{RequestSeq: req.Sequence, DecisionSeq: dec.Sequence}
	}
	send := func(key protocol.CallKey, proof *protocol.ApprovalProof) protocol.Result {
		t.Helper()
		call := protocol.Call{V: 1, RunID: run, Round: 1, CallKey: key, CallID: "c1", Tool: "calculator", Arguments: args,
			Deadline: time.Now().Add(20 * time.Second), Attempt: 1, RequiresApproval: true, Approval: proof}
		if err := d.Publish(t.Context(), loop.Outgoing{Call: call}); err != nil {
			t.Fatalf("Publish: %v", err)
		}
		return waitResult(t, in, key, 30*time.Second)
	}

	approved := protocol.NewCallKey()
	proof := approve(approved)
	if res := send(approved, proof); res.Outcome != protocol.OutcomeOK {
		t.Fatalf("the approved call: %+v, want ok", res)
	}
	for name, c := range map[string]struct {
		key   protocol.CallKey
		proof *protocol.ApprovalProof
	}{
		"no approval":                     {protocol.NewCallKey(), nil},
		"another call's approved request": {protocol.NewCallKey(), proof},
	} {
		if res := send(c.key, c.proof); res.Outcome != protocol.OutcomeDenied {
			t.Errorf("%s: %+v, want denied", name, res)
		}
	}
	// The approved call again, a new message (its run's inbox answered the
	// call already): its execution record names the first, so it is
	// refused and runs no second time.
	call := protocol.Call{V: 1, RunID: run, Round: 1, CallKey: approved, CallID: "c1", Tool: "calculator", Arguments: args,
		Deadline: time.Now().Add(20 * time.Second), Attempt: 1, RequiresApproval: true, Approval: proof}
	subject, _ := subjects.Call(call.Tool, protocol.ClassInteractive, protocol.DefaultClient)
	replyTo, _ := subjects.Result(call.RunID, call.Tool)
	data, _ := protocol.Encode(&call)
	msg := nats.NewMsg(subject)
	msg.Data = data
	msg.Header.Set(protocol.HeaderMsgID, "replay-"+protocol.NewID())
	msg.Header.Set(protocol.HeaderReplyTo, replyTo)
	if _, err := js.PublishMsg(t.Context(), msg, jetstream.WithExpectStream(subjects.CallsStream())); err != nil {
		t.Fatalf("republishing the call: %v", err)
	}
	testsync.WaitUntil(t, 30*time.Second, "the copy refused as replayed", func() bool {
		return strings.Contains(log.String(), `"call_key":"`+string(approved)+`","attempt":1,"code":"replayed","outcome":"denied"`)
	})
	if n := strings.Count(log.String(), `"call_key":"`+string(approved)+`","attempt":1,"outcome":"ok"`); n != 1 {
		t.Fatalf("the approved call finished %d times, want 1", n)
	}
}

// waitResult reads in until the result for key arrives.
func waitResult(t *testing.T, in loop.Inbox, key protocol.CallKey, within time.Duration) protocol.Result {
	t.Helper()
	timeout := time.After(within)
	for {
		select {
		case ev := <-in.Events():
			if ev.Result != nil && ev.Result.CallKey == key {
				return *ev.Result
			}
		case <-timeout:
			t.Fatalf("no result for %s within %v", key, within)
		}
	}
}
