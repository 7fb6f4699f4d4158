package agenttest

import (
	"context"
	"testing"

	"github.com/toolfleet/toolfleet/pkg/client"
	"github.com/toolfleet/toolfleet/pkg/fleettest"
	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/loop/looptest"
	"github.com/toolfleet/toolfleet/pkg/model/scripted"
	"github.com/toolfleet/toolfleet/pkg/protocol"
	"github.com/toolfleet/toolfleet/pkg/runner"
	"github.com/toolfleet/toolfleet/pkg/tool"
)

type RefundIn struct {
	Order string `json:"order" jsonschema:"the order to refund"`
}

// TestRefundNeedsApproval: a gated call waits for the operator, who waits
// for the request (no polling) and approves it; the call then runs once,
// and the transcript is one a model API accepts.
func TestRefundNeedsApproval(t *testing.T) {
	refund := tool.Must(tool.New(tool.Config{Name: "refund", RequiresApproval: true},
		func(_ context.Context, in RefundIn) (string, error) { return "refunded " + in.Order, nil }))
	fleet := fleettest.Start(t, fleettest.Config{Tools: []harness.Tool{refund}})
	model, err := scripted.Parse([]byte(`{"turns": [
		{"tool_calls": [{"id": "c1", "name": "refund", "arguments": {"order": "A-17"}}]},
		{"content": "{{result \"c1\"}}."}]}`))
	if err != nil {
		t.Fatal(err)
	}
	r := fleet.Runner(runner.Config{Model: model})
	done := make(chan *loop.Result, 1)
	go func() {
		res, err := r.Run(t.Context(), "Refund order A-17.")
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()

	operator, err := client.New(fleet.ConnectOperator(), client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	req, err := operator.WaitApproval(t.Context(), client.ApprovalFilter{Tool: "refund"})
	if err != nil || string(req.Arguments) != `{"order":"A-17"}` {
		t.Fatalf("WaitApproval = %+v, %v", req, err)
	}
	if _, err := operator.Approve(t.Context(), req, client.Decision{Approver: "alice"}); err != nil {
		t.Fatal(err)
	}
	res := <-done
	if res == nil {
		t.Fatal("the run returned no result")
	}
	if c1, ok := res.Call("c1"); !ok || c1.Outcome != protocol.OutcomeOK || c1.Observation != "refunded A-17" {
		t.Fatalf("c1 = %+v (found %v)", c1, ok)
	}
	if err := looptest.CheckTranscript(res.Messages); err != nil {
		t.Fatal(err)
	}
}
