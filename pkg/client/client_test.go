package client_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natstest"
	"github.com/toolfleet/toolfleet/pkg/client"
	"github.com/toolfleet/toolfleet/pkg/config"
	"github.com/toolfleet/toolfleet/pkg/fleettest"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// TestNewRefusesBadConfig: a bad configuration is a config.Error naming
// the field, before anything is sent.
func TestNewRefusesBadConfig(t *testing.T) {
	nc := &nats.Conn{} // never used: every case fails before
	for field, tc := range map[string]struct {
		nc  *nats.Conn
		cfg client.Config
	}{
		"Conn":           {nil, client.Config{}},
		"Prefix":         {nc, client.Config{Prefix: "a.b"}},
		"Client":         {nc, client.Config{Client: "a b"}},
		"Domain":         {nc, client.Config{Domain: "x>"}},
		"AttemptTimeout": {nc, client.Config{AttemptTimeout: -1}},
	} {
		_, err := client.New(tc.nc, tc.cfg)
		var ce config.Error
		if !errors.As(err, &ce) || ce.ConfigField() != field {
			t.Errorf("%s: New = %v, want a config.Error naming %s", field, err, field)
		}
	}
}

// TestClientReadsTheFleet: Result before a run ends is ErrNotFound; the
// catalog lists the fleet's tools; a finished run's journal says it is
// finished and that its result (under the client's key) is stored.
func TestClientReadsTheFleet(t *testing.T) {
	fleet, stop := serveFleet(`{"turns": [{"content": "done"}]}`)
	defer stop()
	c, err := client.New(fleet.Conn(), client.Config{Client: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	never, err := c.RunOf("", "never-submitted")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Result(ctx, never); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("Result of a run never submitted: %v, want ErrNotFound", err)
	}
	natstest.WaitFor(t, 30*time.Second, func() error {
		specs, err := c.Catalog(ctx)
		if err != nil || len(specs) != 1 || specs[0].Name != "calculator" {
			return fmt.Errorf("Catalog = %+v, %v; want calculator", specs, err)
		}
		return nil
	})
	run, err := c.Submit(ctx, client.Request{Prompt: "hi", Agent: "default"})
	if err != nil {
		t.Fatal(err)
	}
	if run.Key != "alice."+string(run.ID) || run.Agent != "default" {
		t.Fatalf("run = %+v", run)
	}
	res, err := c.Wait(ctx, run)
	if err != nil || res.Answer != "done" || res.Agent != "default" || res.Submission != run.Submission {
		t.Fatalf("Wait = %+v, %v", res, err)
	}
	if again, err := c.Result(ctx, run); err != nil || again.RunID != run.ID {
		t.Fatalf("Result = %+v, %v", again, err)
	}
	st, err := c.ShowRun(ctx, run.ID)
	if err != nil || st.Status != "finished" || !st.HasResult {
		t.Fatalf("ShowRun = %+v, %v; want finished with its result", st, err)
	}
	if _, err := c.ShowRun(ctx, never.ID); !errors.Is(err, client.ErrNoJournal) {
		t.Fatalf("ShowRun of a run never submitted: %v, want ErrNoJournal", err)
	}
	list, err := c.ListRuns(ctx)
	if err != nil || len(list) != 1 || list[0].RunID != run.ID {
		t.Fatalf("ListRuns = %+v, %v", list, err)
	}
}

// TestClientUnknownAgentIsRefused: a run submitted to an agent the fleet
// does not define ends refused, naming the field, with the agent it asked
// for.
func TestClientUnknownAgentIsRefused(t *testing.T) {
	fleet, stop := serveFleet(`{"turns": [{"content": "done"}]}`)
	defer stop()
	c, err := client.New(fleet.Conn(), client.Config{Client: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	run, err := c.Submit(ctx, client.Request{Prompt: "hi", Agent: "helper"})
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Wait(ctx, run)
	var refused *client.RefusedError
	if !errors.As(err, &refused) || refused.Field != "agent" || res == nil || res.Agent != "helper" {
		t.Fatalf("Wait = %+v, %v; want refused on field agent", res, err)
	}
}

// TestWaitReadsAResultNeverAnnounced: a result stored while the waiting
// client heard nothing of it (stored while its subscription was down, or
// its announcement lost) is read all the same. Once Wait has read the key
// and found nothing, the result is stored with no announcement; Wait
// returns it.
func TestWaitReadsAResultNeverAnnounced(t *testing.T) {
	fleet := fleettest.Start(t, fleettest.Config{})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	js, err := jetstream.New(fleet.Conn())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := natsbus.Provision(ctx, js, protocol.Subjects{}, natsbus.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	nc := fleet.Connect()
	c, err := client.New(nc, client.Config{Client: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	run, err := c.RunOf("", "stored-quietly")
	if err != nil {
		t.Fatal(err)
	}
	type waited struct {
		res *protocol.RunResult
		err error
	}
	done := make(chan waited, 1)
	go func() {
		res, err := c.Wait(ctx, run)
		done <- waited{res, err}
	}()
	// The first read's answer (not found) has come back.
	natstest.WaitFor(t, 30*time.Second, func() error {
		if nc.Stats().InMsgs == 0 {
			return errors.New("Wait has not read the key yet")
		}
		return nil
	})
	kv, err := js.KeyValue(ctx, "fleet_runs")
	if err != nil {
		t.Fatal(err)
	}
	data, err := protocol.Encode(&protocol.RunResult{V: protocol.Version, RunID: run.ID, Submission: run.Submission,
		Agent: protocol.DefaultAgent, Answer: "quiet", TerminationReason: "natural"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, run.Key, data); err != nil {
		t.Fatal(err)
	}
	got := <-done
	if got.err != nil || got.res.Answer != "quiet" || got.res.RunID != run.ID {
		t.Fatalf("Wait = %+v, %v; want the result stored without an announcement", got.res, got.err)
	}
}
