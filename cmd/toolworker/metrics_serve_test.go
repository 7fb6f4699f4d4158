package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/metrics/metricstest"
	"github.com/toolfleet/toolfleet/internal/natsbus/dispatch"
	"github.com/toolfleet/toolfleet/internal/natstest"
	"github.com/toolfleet/toolfleet/internal/testsync"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// freeAddr returns a loopback address with a port free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// status GETs url and returns its status code, or 0 when unreachable.
func status(url string) int {
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

func waitStatus(t *testing.T, url string, want int) {
	t.Helper()
	natstest.WaitFor(t, 15*time.Second, func() error {
		if got := status(url); got != want {
			return fmt.Errorf("GET %s = %d, want %d", url, got, want)
		}
		return nil
	})
}

// TestServesMetricsAndProbes runs the worker program with --metrics-addr
// against a real server: probes follow the connection and the consumers,
// and the worker's call counters count a real call.
func TestServesMetricsAndProbes(t *testing.T) {
	srv := natstest.Start(t)
	addr := freeAddr(t)
	base := "http://" + addr
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan int, 1)
	var out testsync.Buffer
	go func() {
		done <- run(runCtx, []string{"--nats-url", srv.ClientURL(), "--builtin", "calculator", "--name", "metered", "--metrics-addr", addr}, &out, noEnv)
	}()
	t.Cleanup(func() {
		stop()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			t.Error("the worker did not stop")
		}
	})
	waitStatus(t, base+"/readyz", http.StatusOK)
	if got := status(base + "/healthz"); got != http.StatusOK {
		t.Fatalf("/healthz = %d, want 200", got)
	}

	nc := natstest.Connect(t, srv)
	js, _ := jetstream.New(nc)
	d := dispatch.NewDispatcher(nc, js, protocol.Subjects{}, dispatch.DispatcherConfig{})
	run := protocol.NewRunID()
	in, err := d.Open(t.Context(), run)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	call := protocol.Call{V: 1, RunID: run, Round: 1, CallKey: protocol.NewCallKey(), Tool: "calculator",
		Arguments: []byte(`{"expression":"2+3"}`), Deadline: time.Now().Add(10 * time.Second), Attempt: 1}
	if err := d.Publish(t.Context(), loop.Outgoing{Call: call}); err != nil {
		t.Fatal(err)
	}
	for ev := range in.Events() {
		if ev.Result != nil {
			break
		}
	}
	natstest.WaitFor(t, 5*time.Second, func() error {
		f := metricstest.Scrape(t, base+"/metrics")
		if err := f.Want("toolfleet_worker_calls_total", metricstest.L("tool", "calculator", "outcome", "ok"), 1); err != nil {
			return err
		}
		return f.Want("toolfleet_nats_connected", nil, 1)
	})

	// NATS goes away: both probes fail, the gauge drops.
	srv.Shutdown()
	waitStatus(t, base+"/readyz", http.StatusServiceUnavailable)
	waitStatus(t, base+"/healthz", http.StatusServiceUnavailable)
	if err := metricstest.Scrape(t, base+"/metrics").Want("toolfleet_nats_connected", nil, 0); err != nil {
		t.Fatal(err)
	}
}
