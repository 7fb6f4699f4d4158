package bustest

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// StoreApproval publishes, as a coordinator and an operator would, a
// request for call (with the given deadline) and then the decisions into
// the approvals stream, and returns their sequences.
func (f *Fleet) StoreApproval(t *testing.T, call protocol.Call, reqDeadline time.Time, decisions ...string) (reqSeq uint64, decSeqs []uint64) {
	t.Helper()
	digest, err := protocol.Digest(call.RunID, call.CallKey, call.Tool, call.Arguments)
	if err != nil {
		t.Fatal(err)
	}
	reqSubj, _ := f.Subjects.ApprovalRequest(call.RunID, call.CallKey)
	decSubj, _ := f.Subjects.ApprovalDecision(call.RunID, call.CallKey)
	data, err := protocol.Encode(&protocol.ApprovalRequest{
		V: 1, RunID: call.RunID, CallKey: call.CallKey, Round: 1, Tool: call.Tool, Arguments: call.Arguments,
		Digest: digest, Deadline: reqDeadline, DecisionSubject: decSubj,
	})
	if err != nil {
		t.Fatal(err)
	}
	ack, err := f.JS.Publish(Ctx(t), reqSubj, data)
	if err != nil {
		t.Fatalf("publishing the request: %v", err)
	}
	for _, d := range decisions {
		if d == "approve" || d == "deny" {
			d = `{"digest":"` + digest + `","approved":` + map[string]string{"approve": "true", "deny": "false"}[d] + `,"approver":"alice"}`
		}
		a, err := f.JS.Publish(Ctx(t), decSubj, []byte(d))
		if err != nil {
			t.Fatalf("publishing a decision: %v", err)
		}
		decSeqs = append(decSeqs, a.Sequence)
	}
	return ack.Sequence, decSeqs
}

// Republish stores call on its tool's subject as the dispatcher does, but
// with a fresh message id, as a copy published past the dedup window would
// be.
func (f *Fleet) Republish(t *testing.T, call protocol.Call) {
	t.Helper()
	subject, _ := f.Subjects.Call(call.Tool, protocol.ClassInteractive, protocol.DefaultClient)
	replyTo, _ := f.Subjects.Result(call.RunID, call.Tool)
	data, err := protocol.Encode(&call)
	if err != nil {
		t.Fatal(err)
	}
	msg := nats.NewMsg(subject)
	msg.Data = data
	msg.Header.Set(protocol.HeaderMsgID, "replay-"+protocol.NewID())
	msg.Header.Set(protocol.HeaderReplyTo, replyTo)
	msg.Header.Set(protocol.HeaderDeadline, call.CallDeadline().Header())
	if _, err := f.JS.PublishMsg(Ctx(t), msg); err != nil {
		t.Fatal(err)
	}
}
