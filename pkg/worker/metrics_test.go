package worker_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolfleet/toolfleet/pkg/fleettest"
	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/model/scripted"
	"github.com/toolfleet/toolfleet/pkg/runner"
	"github.com/toolfleet/toolfleet/pkg/worker"
)

// TestMetricsWhenConfigured: a worker given a registry counts its calls
// there, as the toolworker command's /metrics does.
func TestMetricsWhenConfigured(t *testing.T) {
	reg := prometheus.NewRegistry()
	fleet := fleettest.Start(t, fleettest.Config{Tools: []harness.Tool{harness.Echo()}, Worker: worker.Config{Metrics: reg}})
	model, err := scripted.Parse([]byte(`{"turns": [{"tool_calls": [{"id": "c1", "name": "echo", "arguments": {"text": "hi"}}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fleet.Runner(runner.Config{Model: model}).Run(t.Context(), "echo hi"); err != nil {
		t.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, f := range families {
		got[f.GetName()] = true
	}
	for _, name := range []string{"toolfleet_worker_calls_total", "toolfleet_worker_exec_escapes_total", "toolfleet_stream_config_checks_total"} {
		if !got[name] {
			t.Errorf("the registry lacks %s; it has %v", name, got)
		}
	}
}
