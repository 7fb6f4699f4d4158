package coordinator_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/coordinator"
	"github.com/toolfleet/toolfleet/internal/metrics/metricstest"
	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natstest"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/model/scripted"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

var L = metricstest.L

// getStatus GETs url and returns its status code, or 0 when unreachable.
func getStatus(url string) int {
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestMetricsAfterTheDemo runs the bundled demo with a metrics server and
// scrapes it: the coordinator counted three ok calculator calls and one
// natural run, the in-process worker ran the same three calls, and the
// probes answer 200 — until NATS goes away, when /readyz and /healthz
// answer 503, and again once it is back.
func TestMetricsAfterTheDemo(t *testing.T) {
	srv := natstest.Start(t)
	c, err := coordinator.Open(t.Context(), coordinator.Config{
		Conn:        natsbus.ConnConfig{URL: srv.ClientURL()},
		Workers:     1,
		Model:       scripted.Demo(),
		MetricsAddr: "127.0.0.1:0",
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	res, err := c.Run(t.Context(), "demo")
	if err != nil || res.TerminationReason != loop.TerminationNatural {
		t.Fatalf("Run = %v, %v; want a natural end", res, err)
	}
	base := "http://" + c.MetricsAddr()

	f := metricstest.Scrape(t, base+"/metrics")
	for _, w := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"toolfleet_coordinator_calls_total", L("tool", "calculator", "outcome", "ok"), 3},
		{"toolfleet_coordinator_runs_total", L("reason", "natural"), 1},
		{"toolfleet_coordinator_runs_total", L("reason", "error"), 0},
		{"toolfleet_coordinator_runs_in_flight", nil, 0},
		{"toolfleet_coordinator_call_duration_seconds", L("tool", "calculator"), 3},
		{"toolfleet_model_call_duration_seconds", L("result", "ok"), 3},
		{"toolfleet_worker_calls_total", L("tool", "calculator", "outcome", "ok"), 3},
		{"toolfleet_worker_calls_in_flight", L("tool", "calculator"), 0},
		{"toolfleet_nats_connected", nil, 1},
	} {
		if err := f.Want(w.name, w.labels, w.want); err != nil {
			t.Error(err)
		}
	}
	if n := len(f["toolfleet_coordinator_calls_total"].GetMetric()); n != 1 {
		t.Errorf("%d call series, want only calculator/ok", n)
	}
	for _, p := range []string{"/healthz", "/readyz"} {
		if got := getStatus(base + p); got != http.StatusOK {
			t.Fatalf("%s = %d, want 200", p, got)
		}
	}

	srv.Shutdown()
	natstest.WaitFor(t, 15*time.Second, func() error {
		for _, p := range []string{"/readyz", "/healthz"} {
			if got := getStatus(base + p); got != http.StatusServiceUnavailable {
				return fmt.Errorf("%s = %d with NATS down, want 503", p, got)
			}
		}
		return nil
	})
	if err := metricstest.Scrape(t, base+"/metrics").Want("toolfleet_nats_connected", nil, 0); err != nil {
		t.Fatal(err)
	}

	// NATS comes back: the coordinator reconnects and is ready again.
	natstest.Restart(t, srv)
	natstest.WaitFor(t, 15*time.Second, func() error {
		if got := getStatus(base + "/readyz"); got != http.StatusOK {
			return fmt.Errorf("/readyz = %d after NATS restarted, want 200", got)
		}
		return nil
	})
}

// TestMetricsOfManyInProcessWorkers: in-process workers share the
// coordinator's registry: a coordinator with two of them and a metrics
// server opens (each worker registers its collectors, the second finding
// the first's), and the workers' calls are counted together.
func TestMetricsOfManyInProcessWorkers(t *testing.T) {
	srv := natstest.Start(t)
	c, err := coordinator.Open(t.Context(), coordinator.Config{
		Conn:        natsbus.ConnConfig{URL: srv.ClientURL()},
		Workers:     2,
		Model:       scripted.Demo(),
		MetricsAddr: "127.0.0.1:0",
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Run(t.Context(), "demo"); err != nil {
		t.Fatal(err)
	}
	// a worker counts a call once it is acknowledged, after its result
	natstest.WaitFor(t, 10*time.Second, func() error {
		return metricstest.Scrape(t, "http://"+c.MetricsAddr()+"/metrics").
			Want("toolfleet_worker_calls_total", L("tool", "calculator", "outcome", "ok"), 3)
	})
}

func TestMetricsAddrRefused(t *testing.T) {
	_, err := coordinator.Open(t.Context(), coordinator.Config{
		Model:       scripted.Demo(),
		StoreDir:    t.TempDir(),
		MetricsAddr: "127.0.0.1:notaport",
	})
	if err == nil {
		t.Fatal("Open with a bad metrics address succeeded")
	}
}

// TestSchemaConflictIsReportedAndNeverMixed runs a worker serving the
// built-in echo ({"text"}) and then one serving an echo with another schema
// ({"message"}), whose spec the catalog ends up with. The coordinator must
// report the conflict (metric and SchemaConflicts), keep offering echo with
// the catalog's schema, and — once only the stale worker is left — the
// stale worker must refuse the call (invalid_arguments), never run it.
func TestSchemaConflictIsReportedAndNeverMixed(t *testing.T) {
	t.Parallel() // its own server; it waits on the fleet, not the CPU
	srv := natstest.Start(t)
	nc := natstest.Connect(t, srv)
	js, _ := jetstream.New(nc)
	kvDigest := func() string {
		kv, err := js.KeyValue(t.Context(), "fleet_tools")
		if err != nil {
			return ""
		}
		e, err := kv.Get(t.Context(), "echo")
		if err != nil {
			return ""
		}
		spec, err := protocol.DecodeToolSpec(e.Value(), 0)
		if err != nil {
			return ""
		}
		return spec.SchemaDigest
	}
	startWorker := func(name, manifest string, builtins ...string) (digest string, stop func()) {
		w := newWorker(t, natstest.Connect(t, srv), name, manifest, builtins...)
		digest = w.Tools()[0].SchemaDigest
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); w.Run(ctx) }()
		stop = func() { cancel(); <-done }
		t.Cleanup(stop)
		natstest.WaitFor(t, 10*time.Second, func() error {
			if got := kvDigest(); got != digest {
				return fmt.Errorf("catalog digest of echo = %q, want %q", got, digest)
			}
			return nil
		})
		return digest, stop
	}
	oldDigest, _ := startWorker("old", "", "echo")
	manifest := filepath.Join(t.TempDir(), "tools.json")
	if err := os.WriteFile(manifest, []byte(`{"tools":[{"name":"echo","description":"echoes",
		"parameters":{"type":"object","properties":{"message":{"type":"string"}},"required":["message"],"additionalProperties":false},
		"command":["cat"]}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	newDigest, stopNew := startWorker("new", manifest)

	model, err := scripted.Parse([]byte(`{"turns":[
	  {"tool_calls":[{"id":"a","name":"echo","arguments":{"message":"hi"}}]},
	  {"content":"done"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	c, err := coordinator.Open(t.Context(), coordinator.Config{
		Conn:        natsbus.ConnConfig{URL: srv.ClientURL()},
		Model:       model,
		MetricsAddr: "127.0.0.1:0",
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	natstest.WaitFor(t, 10*time.Second, func() error {
		got := c.SchemaConflicts()
		if len(got) != 1 || got[0].Tool != "echo" || got[0].CatalogDigest != newDigest || len(got[0].Digests) != 2 {
			return fmt.Errorf("conflicts = %+v, want echo served with %s (old) and %s (new)", got, oldDigest, newDigest)
		}
		return nil
	})
	f := metricstest.Scrape(t, "http://"+c.MetricsAddr()+"/metrics")
	for _, err := range []error{
		f.Want("toolfleet_schema_conflicts_total", L("tool", "echo"), 1),
		f.Want("toolfleet_schema_conflicted_tools", nil, 1),
	} {
		if err != nil {
			t.Error(err)
		}
	}

	// Only the stale worker is left: the call, valid for the catalog's
	// schema, is refused by the worker rather than run.
	stopNew()
	res, err := c.Run(t.Context(), "go")
	if err != nil {
		t.Fatal(err)
	}
	if rec := res.Calls[0]; rec.Outcome != protocol.OutcomeInvalidArguments || rec.Worker != "old" {
		t.Fatalf("call = %+v, want invalid_arguments from the stale worker", rec)
	}
}
