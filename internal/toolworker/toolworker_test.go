package toolworker_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natstest"
	"github.com/toolfleet/toolfleet/internal/toolworker"
	"github.com/toolfleet/toolfleet/pkg/config"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

func TestConfigErrorsNameTheField(t *testing.T) {
	tests := []struct {
		name  string
		cfg   toolworker.Config
		field string
	}{
		{"no tools", toolworker.Config{}, "Builtins"},
		{"unknown builtin", toolworker.Config{Builtins: []string{"nope"}}, "Builtins"},
		{"missing manifest", toolworker.Config{ToolsFile: "/nonexistent/tools.json"}, "ToolsFile"},
		{"bad prefix", toolworker.Config{Prefix: "a.b", Builtins: []string{"echo"}}, "Prefix"},
		{"bad name", toolworker.Config{Worker: natsbus.WorkerConfig{Name: "has space"}, Builtins: []string{"echo"}}, "Worker.Name"},
		{"bad concurrency", toolworker.Config{Worker: natsbus.WorkerConfig{Concurrency: -3}, Builtins: []string{"echo"}}, "Worker.Concurrency"},
		{"two auth methods", toolworker.Config{Conn: natsbus.ConnConfig{User: "u", CredsFile: "/nonexistent.creds"}, Builtins: []string{"echo"}}, "Conn.auth"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// Run reports configuration errors before connecting: the URL
			// points nowhere and the context would let it retry for long.
			tc.cfg.Conn.URL = "nats://127.0.0.1:1"
			tc.cfg.Conn.Getenv = func(string) string { return "" }
			c, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			err := toolworker.Run(c, tc.cfg)
			var ce config.Error
			if !errors.As(err, &ce) || ce.ConfigField() != tc.field {
				t.Fatalf("Run = %v, want a config.Error for %s", err, tc.field)
			}
			if tc.cfg.Conn.CredsFile != "" {
				return // New takes a connection: it never reads Conn
			}
			if _, err := toolworker.New(nil, tc.cfg); !errors.As(err, &ce) {
				t.Fatalf("New = %v, want a config.Error", err)
			}
		})
	}
}

// TestRunServesItsTools runs the whole worker program against a server,
// as cmd/toolworker does, and a second worker in process, as the
// coordinator does.
func TestRunServesItsTools(t *testing.T) {
	srv := natstest.Start(t)
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 2)
	go func() {
		done <- toolworker.Run(runCtx, toolworker.Config{
			Conn:     natsbus.ConnConfig{URL: srv.ClientURL()},
			Builtins: []string{"calculator", "echo"},
			Worker:   natsbus.WorkerConfig{Name: "tcp-worker"},
			Logger:   zerolog.Nop(),
		})
	}()
	inproc, err := nats.Connect("", srv.InProcess())
	if err != nil {
		t.Fatal(err)
	}
	defer inproc.Close()
	w, err := toolworker.New(inproc, toolworker.Config{Builtins: []string{"echo"}, Worker: natsbus.WorkerConfig{Name: "inproc-1"}})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	go func() { done <- w.Run(runCtx) }()

	nc := natstest.Connect(t, srv)
	js, _ := jetstream.New(nc)
	subjects := protocol.Subjects{}
	c, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	var cat *natsbus.Catalog
	natstest.WaitFor(t, 10*time.Second, func() error {
		var err error
		if cat == nil {
			if cat, err = natsbus.NewCatalog(c, js, subjects, zerolog.Nop()); err != nil {
				return err
			}
		}
		specs, err := cat.Tools(c)
		if err != nil {
			return err
		}
		if len(specs) != 2 {
			return fmt.Errorf("catalog lists %d tools, want calculator and echo", len(specs))
		}
		return nil
	})
	defer cat.Close()

	d := natsbus.NewDispatcher(nc, js, subjects, natsbus.DispatcherConfig{})
	run := protocol.NewRunID()
	in, err := d.Open(c, run)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	call := protocol.Call{V: 1, RunID: run, Round: 1, CallKey: protocol.NewCallKey(), Tool: "calculator",
		Arguments: []byte(`{"expression":"2+3"}`), Deadline: time.Now().Add(10 * time.Second), Attempt: 1}
	if err := d.Publish(c, loop.Outgoing{Call: call}); err != nil {
		t.Fatal(err)
	}
	for r := range in.Events() {
		if r.Result == nil {
			continue
		}
		if r.Result.Outcome != protocol.OutcomeOK || r.Result.Output != "5" || r.Result.Worker != "tcp-worker" {
			t.Fatalf("result = %+v, want ok 5 from tcp-worker", r.Result)
		}
		break
	}

	stop()
	for range 2 {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("Run after its context ended = %v, want nil", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Run did not return after its context ended")
		}
	}
}

// TestRunRefusesDriftedStreams: a worker that finds a stream configured
// otherwise than expected (here a republish an attacker added) refuses to
// start, naming the stream and field, and changes nothing.
func TestRunRefusesDriftedStreams(t *testing.T) {
	srv := natstest.Start(t)
	nc := natstest.Connect(t, srv)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	subjects := protocol.Subjects{}
	if err := natsbus.EnsureStreams(t.Context(), js, subjects, natsbus.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	var results jetstream.StreamConfig
	for _, fs := range natsbus.FleetStreams(subjects, natsbus.StreamConfig{}) {
		if fs.Config.Name == subjects.ResultsStream() {
			results = fs.Config
		}
	}
	bad := results
	bad.RePublish = &jetstream.RePublish{Source: ">", Destination: "stolen.>"}
	if _, err := js.UpdateStream(t.Context(), bad); err != nil {
		t.Fatal(err)
	}
	w, err := toolworker.New(nc, toolworker.Config{Builtins: []string{"echo"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	err = w.Run(ctx)
	var de *natsbus.DriftError
	if !errors.As(err, &de) || !strings.Contains(err.Error(), "FLEET_RESULTS republish") {
		t.Fatalf("Run = %v, want a drift error naming FLEET_RESULTS republish", err)
	}
	st, err := js.Stream(t.Context(), subjects.ResultsStream())
	if err != nil || st.CachedInfo().Config.RePublish == nil {
		t.Fatalf("the worker changed the stream: %v", err)
	}
}
