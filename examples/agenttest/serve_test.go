package agenttest

import (
	"context"
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/pkg/agent"
	"github.com/toolfleet/toolfleet/pkg/client"
	"github.com/toolfleet/toolfleet/pkg/fleettest"
	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/model/providers"
	"github.com/toolfleet/toolfleet/pkg/protocol"
	"github.com/toolfleet/toolfleet/pkg/serve"
	"github.com/toolfleet/toolfleet/pkg/tool"
)

// refunder is an agent scoped to the refund tool, whose calls need an
// operator's approval, on a scripted model that refunds order A-17.
const refunder = `{"name": "refunder", "instructions": "Refund what the customer asks.",
	"model": {"provider": "scripted", "script": {"turns": [
		{"tool_calls": [{"id": "c1", "name": "refund", "arguments": {"order": "A-17"}}]},
		{"content": "{{result \"c1\"}}."}]}},
	"tools": ["refund"], "require_approval": ["refund"]}`

// TestServedRunNeedsApproval is the front door end to end, from a module
// of its own: a fleet serving its agents (pkg/serve through fleettest), a
// run submitted as a client, its approval request awaited by the operator
// (one consumer, no polling) and approved, and the run's result read by
// call id — no binary built, nothing internal imported.
func TestServedRunNeedsApproval(t *testing.T) {
	refund := tool.Must(tool.New(tool.Config{Name: "refund"},
		func(_ context.Context, in RefundIn) (string, error) { return "refunded " + in.Order, nil }))
	def, err := agent.Parse([]byte(refunder))
	if err != nil {
		t.Fatal(err)
	}
	fleet := fleettest.Start(t, fleettest.Config{
		Tools:  []harness.Tool{refund},
		Agents: []agent.Definition{def},
		Serve:  &serve.Config{Models: (&providers.Models{}).Model},
	})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	run, err := fleet.Client().Submit(ctx, client.Request{Agent: "refunder", Prompt: "Refund order A-17."})
	if err != nil {
		t.Fatal(err)
	}

	operator, err := client.New(fleet.ConnectOperator(), client.Config{Prefix: fleet.Prefix()})
	if err != nil {
		t.Fatal(err)
	}
	req, err := operator.WaitApproval(ctx, client.ApprovalFilter{Run: run.ID})
	if err != nil || req.Tool != "refund" || string(req.Arguments) != `{"order":"A-17"}` {
		t.Fatalf("WaitApproval = %+v, %v; want the refund of A-17", req, err)
	}
	if _, err := operator.Approve(ctx, req, client.Decision{Approver: "alice"}); err != nil {
		t.Fatal(err)
	}

	stored, err := fleet.Client().Wait(ctx, run)
	if err != nil {
		t.Fatal(err)
	}
	res, err := client.LoopResult(stored)
	if err != nil {
		t.Fatal(err)
	}
	c1, ok := res.Call("c1")
	if !ok || c1.Outcome != protocol.OutcomeOK || c1.Observation != "refunded A-17" {
		t.Fatalf("c1 = %+v (found %v), want ok: refunded A-17", c1, ok)
	}
	if res.Answer != "refunded A-17." || res.TerminationReason != loop.TerminationNatural {
		t.Fatalf("answer %q (%s), want %q", res.Answer, res.TerminationReason, "refunded A-17.")
	}
}
