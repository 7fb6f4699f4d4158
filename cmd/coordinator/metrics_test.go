package main

import (
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/internal/metrics/metricstest"
	"github.com/toolfleet/toolfleet/internal/natstest"
)

func TestMetricsAddrFlag(t *testing.T) {
	for _, cmd := range []string{"run", "serve"} {
		code, stdout, stderr := runCLI(t, cmd, "--help")
		if code != exitOK || !strings.Contains(stdout+stderr, "-metrics-addr") {
			t.Errorf("%s --help (exit %d) does not list --metrics-addr:\n%s%s", cmd, code, stdout, stderr)
		}
	}
	for _, bad := range []string{"9090", "localhost", ":http", ":70000", "a:b:c"} {
		code, _, stderr := runCLI(t, "run", "--metrics-addr", bad)
		if code != exitUsage || !strings.Contains(stderr, "--metrics-addr") {
			t.Errorf("run --metrics-addr %q: exit %d, want %d naming the flag; stderr:\n%s", bad, code, exitUsage, stderr)
		}
	}
}

// TestServeServesMetrics serves two demo runs with --metrics-addr and
// scrapes the counters: two natural runs, six ok calculator calls on the
// coordinator and on its in-process worker.
func TestServeServesMetrics(t *testing.T) {
	srv := natstest.Start(t)
	url := srv.ClientURL()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	startServe(t, "--nats-url", url, "--workers", "1", "--name", "metered", "--metrics-addr", addr)
	for range 2 {
		if code, _, stderr := submit(t, "--nats-url", url, "--wait", demoPrompt); code != exitOK {
			t.Fatalf("submit exit %d; stderr:\n%s", code, stderr)
		}
	}
	base := "http://" + addr
	natstest.WaitFor(t, 5*time.Second, func() error {
		f := metricstest.Scrape(t, base+"/metrics")
		for _, w := range []struct {
			name   string
			labels map[string]string
			want   float64
		}{
			{"toolfleet_coordinator_runs_total", metricstest.L("reason", "natural"), 2},
			{"toolfleet_coordinator_runs_in_flight", nil, 0},
			{"toolfleet_coordinator_calls_total", metricstest.L("tool", "calculator", "outcome", "ok"), 6},
			{"toolfleet_worker_calls_total", metricstest.L("tool", "calculator", "outcome", "ok"), 6},
		} {
			if err := f.Want(w.name, w.labels, w.want); err != nil {
				return err
			}
		}
		return nil
	})
	resp, err := http.Get(base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/readyz = %d, want 200", resp.StatusCode)
	}
}
