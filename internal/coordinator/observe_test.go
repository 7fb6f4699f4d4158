package coordinator_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/internal/coordinator"
	"github.com/toolfleet/toolfleet/internal/metrics/metricstest"
	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natstest"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/model/scripted"
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
