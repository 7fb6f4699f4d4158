package fleettest_test

import (
	"context"
	"testing"

	"github.com/toolfleet/toolfleet/pkg/fleettest"
	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/model/scripted"
	"github.com/toolfleet/toolfleet/pkg/runner"
	"github.com/toolfleet/toolfleet/pkg/tool"
)

type addIn struct {
	A int `json:"a"`
	B int `json:"b"`
}

var add = tool.Must(tool.New(tool.Config{Name: "add", Idempotent: true},
	func(_ context.Context, in addIn) (int, error) { return in.A + in.B, nil }))

func TestAgentOverAFleet(t *testing.T) {
	fleet := fleettest.Start(t, fleettest.Config{Tools: []harness.Tool{add}, Workers: 2})
	model, err := scripted.Parse([]byte(`{"turns": [
		{"tool_calls": [{"id": "c1", "name": "add", "arguments": {"a": 2, "b": 3}},
		                {"id": "c2", "name": "add", "arguments": {"a": "x"}}]},
		{"content": "2 + 3 = {{result \"c1\"}}"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	res, err := fleet.Runner(runner.Config{Model: model}).Run(t.Context(), "2 + 3?")
	if err != nil {
		t.Fatal(err)
	}
	if res.Answer != "2 + 3 = 5" || res.TerminationReason != loop.TerminationNatural {
		t.Fatalf("Answer=%q (%s), want %q", res.Answer, res.TerminationReason, "2 + 3 = 5")
	}
	outcomes := map[string]string{}
	for _, c := range res.Calls {
		outcomes[c.CallID] = string(c.Outcome)
	}
	if outcomes["c1"] != "ok" || outcomes["c2"] != "invalid_arguments" {
		t.Fatalf("outcomes = %v, want c1 ok and c2 invalid_arguments", outcomes)
	}
	if fleet.Conn() == nil || fleet.Prefix() != "fleet" || fleet.URL() != "" {
		t.Fatalf("Conn=%v Prefix=%q URL=%q", fleet.Conn(), fleet.Prefix(), fleet.URL())
	}
}

func TestListenGivesAURL(t *testing.T) {
	fleet := fleettest.Start(t, fleettest.Config{Listen: true, Prefix: "team"})
	if fleet.URL() == "" || fleet.Prefix() != "team" {
		t.Fatalf("URL=%q Prefix=%q, want a URL and team", fleet.URL(), fleet.Prefix())
	}
}
