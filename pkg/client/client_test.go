package client_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolfleet/toolfleet/internal/natstest"
	"github.com/toolfleet/toolfleet/pkg/client"
	"github.com/toolfleet/toolfleet/pkg/config"
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
