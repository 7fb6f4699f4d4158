package fleettest_test

import (
	"context"
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/internal/testsync"

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

// TestNewAndClose: a fleet started without a test hands out its workers
// (ready, serving) and a client; Close stops the workers, closes every
// connection it handed out and the server, and may be called again.
func TestNewAndClose(t *testing.T) {
	fleet, err := fleettest.New(fleettest.Config{Tools: []harness.Tool{add}, Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	workers := fleet.Workers()
	if len(workers) != 2 {
		t.Fatalf("Workers = %d, want 2", len(workers))
	}
	for i, w := range workers {
		testsync.WaitFor(t, 30*time.Second, func() error { return w.Ready(t.Context()) })
		if err := w.Healthy(t.Context()); err != nil {
			t.Fatalf("worker %d: %v", i, err)
		}
	}
	c := fleet.Client()
	if c != fleet.Client() || c.Name() != "client" {
		t.Fatalf("Client = %p then %p named %q, want one client named client", c, fleet.Client(), c.Name())
	}
	nc, op := fleet.Conn(), fleet.ConnectOperator()
	if err := fleet.Close(); err != nil {
		t.Fatalf("Close = %v", err)
	}
	if !nc.IsClosed() || !op.IsClosed() {
		t.Fatalf("after Close: the coordinator's connection closed %v, the operator's %v; want both closed", nc.IsClosed(), op.IsClosed())
	}
	for i, w := range workers {
		if err := w.Healthy(t.Context()); err == nil {
			t.Errorf("worker %d is healthy after Close", i)
		}
	}
	if err := fleet.Close(); err != nil {
		t.Fatalf("Close again = %v", err)
	}
}

// TestNewRefusesBadConfig: a configuration that cannot work is an error
// from New, with nothing started.
func TestNewRefusesBadConfig(t *testing.T) {
	for _, cfg := range []fleettest.Config{{Workers: -1}, {Prefix: "a.b"}} {
		if f, err := fleettest.New(cfg); err == nil {
			f.Close()
			t.Errorf("New(%+v) = a fleet, want an error", cfg)
		}
	}
}
