package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/pkg/fleettest"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/model/scripted"
	"github.com/toolfleet/toolfleet/pkg/runner"
)

// TestServesBothTools runs the example worker against a fleet listening on
// TCP, as the binary would: the invoice is sent, and the refund, which no
// operator approves, expires without running.
func TestServesBothTools(t *testing.T) {
	fleet := fleettest.Start(t, fleettest.Config{Listen: true})
	ctx, cancel := context.WithCancel(context.Background())
	ready, done := make(chan struct{}), make(chan error, 1)
	go func() { done <- run(ctx, fleet.URL(), ready) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	})
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("run stopped before it served: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("the tools are not in the catalog")
	}
	model, err := scripted.Parse([]byte(`{"turns": [
		{"tool_calls": [{"id": "c1", "name": "send_invoice", "arguments": {"customer": "acme", "cents": 1250}},
		                {"id": "c2", "name": "refund", "arguments": {"invoice": "inv-1"}}]},
		{"content": "{{result \"c1\"}} / {{result \"c2\"}}"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	r := fleet.Runner(runner.Config{Model: model, Loop: loop.Config{ApprovalTimeout: 500 * time.Millisecond}})
	res, err := r.Run(t.Context(), "Invoice acme 12.50 and refund inv-1.")
	if err != nil {
		t.Fatal(err)
	}
	outcomes := map[string]string{}
	for _, c := range res.Calls {
		outcomes[c.CallID] = string(c.Outcome)
	}
	if outcomes["c1"] != "ok" || outcomes["c2"] != "approval_expired" {
		t.Fatalf("outcomes = %v, want the invoice sent and the refund expired", outcomes)
	}
	if !strings.Contains(res.Answer, `"customer":"acme","cents":1250`) {
		t.Fatalf("Answer = %q, want the invoice", res.Answer)
	}
}
