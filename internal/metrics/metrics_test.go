package metrics_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/toolfleet/toolfleet/internal/metrics"
	"github.com/toolfleet/toolfleet/internal/metrics/metricstest"
	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natsbus/admission"
	"github.com/toolfleet/toolfleet/internal/natsbus/workerbus"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

var L = metricstest.L

func TestCoordinatorMetrics(t *testing.T) {
	reg := metrics.NewRegistry()
	c := metrics.NewCoordinator(reg)
	c.RunStarted()
	c.RunStarted()
	c.RunEnded(loop.TerminationNatural)
	c.RunEnded("made-up")
	c.ModelCall(2*time.Second, loop.Usage{PromptTokens: 100, CompletionTokens: 7}, nil)
	c.ModelCall(time.Second, loop.Usage{}, errors.New("boom"))
	c.CallEnded("calculator", protocol.OutcomeOK, 10*time.Millisecond)
	c.CallEnded("calculator", protocol.OutcomeOK, 20*time.Millisecond)
	c.CallEnded("", protocol.OutcomeUnknownTool, 0)
	c.CallEnded("has.dot", protocol.OutcomeUnknownTool, 0)
	c.CallEnded("echo", protocol.OutcomeRejected, 0)
	c.CallEnded("echo", "forged", 0)
	c.Approval(loop.ApprovalApproved)
	c.Approval(loop.ApprovalExpired)
	c.Approval("yes please")
	c.SchemaConflict("echo")
	c.ConflictedTools(1)

	f := metricstest.Gather(t, reg)
	for _, w := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"toolfleet_coordinator_runs_total", L("reason", "natural"), 1},
		{"toolfleet_coordinator_runs_total", L("reason", "_invalid"), 1},
		{"toolfleet_coordinator_runs_total", L("reason", "max_rounds"), 0}, // present from the start
		{"toolfleet_coordinator_runs_in_flight", nil, 0},
		{"toolfleet_model_call_duration_seconds", L("result", "ok"), 1},
		{"toolfleet_model_call_duration_seconds", L("result", "error"), 1},
		{"toolfleet_model_tokens_total", L("kind", "prompt"), 100},
		{"toolfleet_model_tokens_total", L("kind", "completion"), 7},
		{"toolfleet_coordinator_calls_total", L("tool", "calculator", "outcome", "ok"), 2},
		{"toolfleet_coordinator_calls_total", L("tool", "_unknown", "outcome", "unknown_tool"), 2},
		{"toolfleet_coordinator_calls_total", L("tool", "echo", "outcome", "rejected"), 1},
		{"toolfleet_coordinator_calls_total", L("tool", "echo", "outcome", "_invalid"), 1},
		{"toolfleet_coordinator_call_duration_seconds", L("tool", "calculator"), 2},
		{"toolfleet_coordinator_rejected_calls_total", nil, 1},
		{"toolfleet_coordinator_approvals_total", L("result", "approved"), 1},
		{"toolfleet_coordinator_approvals_total", L("result", "expired"), 1},
		{"toolfleet_coordinator_approvals_total", L("result", "_invalid"), 1},
		{"toolfleet_schema_conflicts_total", L("tool", "echo"), 1},
		{"toolfleet_schema_conflicted_tools", nil, 1},
	} {
		if err := f.Want(w.name, w.labels, w.want); err != nil {
			t.Error(err)
		}
	}
	if _, ok := f["go_goroutines"]; !ok {
		t.Error("the Go runtime collector is not registered")
	}
}

func TestWorkerMetrics(t *testing.T) {
	reg := metrics.NewRegistry()
	w := metrics.NewWorker(reg)
	for _, ev := range []workerbus.CallEvent{
		{Kind: workerbus.CallDelivered, Attempt: 1},
		{Kind: workerbus.CallDelivered, Attempt: 2},
		{Kind: workerbus.CallDelivered, Attempt: 3},
		{Kind: workerbus.CallStarted},
		{Kind: workerbus.CallStarted},
		{Kind: workerbus.CallFinished, Outcome: protocol.OutcomeOK, Duration: 30 * time.Millisecond},
		{Kind: workerbus.CallTerminated, Reason: workerbus.TerminatedExpired},
		{Kind: workerbus.CallTerminated, Reason: workerbus.TerminatedMalformed},
		{Kind: workerbus.CallTerminated, Reason: admission.TerminatedRateLimited},
		{Kind: workerbus.CallSkipped, Reason: workerbus.SkippedClaimed},
		{Kind: workerbus.ResultFailed, Outcome: protocol.OutcomeOK},
	} {
		ev.Tool = "echo"
		w.Observe(ev)
	}

	f := metricstest.Gather(t, reg)
	for _, want := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"toolfleet_worker_redeliveries_total", L("tool", "echo"), 2},
		{"toolfleet_worker_calls_in_flight", L("tool", "echo"), 1},
		{"toolfleet_worker_calls_total", L("tool", "echo", "outcome", "ok"), 1},
		{"toolfleet_worker_call_duration_seconds", L("tool", "echo"), 1},
		{"toolfleet_worker_calls_terminated_total", L("tool", "echo", "reason", "expired"), 1},
		{"toolfleet_worker_calls_terminated_total", L("tool", "echo", "reason", "malformed"), 1},
		{"toolfleet_worker_calls_terminated_total", L("tool", "echo", "reason", "rate_limited"), 1},
		{"toolfleet_worker_result_failures_total", L("tool", "echo"), 1},
	} {
		if err := f.Want(want.name, want.labels, want.want); err != nil {
			t.Error(err)
		}
	}
}

// TestToolLabelsAreBounded feeds more distinct tool names than
// MaxToolLabels: the excess is labelled _other, so a churning catalog
// cannot grow the series without bound.
func TestToolLabelsAreBounded(t *testing.T) {
	reg := metrics.NewRegistry()
	c := metrics.NewCoordinator(reg)
	n := metrics.MaxToolLabels + 50
	for i := range n {
		c.CallEnded(fmt.Sprintf("tool_%d", i), protocol.OutcomeOK, 0)
	}
	c.CallEnded("tool_0", protocol.OutcomeOK, 0) // seen before the bound: keeps its label
	f := metricstest.Gather(t, reg)
	series := f["toolfleet_coordinator_calls_total"].GetMetric()
	if len(series) != metrics.MaxToolLabels+1 {
		t.Fatalf("%d call series, want %d tools and _other", len(series), metrics.MaxToolLabels)
	}
	if err := f.Want("toolfleet_coordinator_calls_total", L("tool", "_other", "outcome", "ok"), 50); err != nil {
		t.Fatal(err)
	}
	if err := f.Want("toolfleet_coordinator_calls_total", L("tool", "tool_0", "outcome", "ok"), 2); err != nil {
		t.Fatal(err)
	}
}

func TestConnGauge(t *testing.T) {
	reg := metrics.NewRegistry()
	up := false
	metrics.RegisterConn(reg, func() bool { return up })
	if err := metricstest.Gather(t, reg).Want("toolfleet_nats_connected", nil, 0); err != nil {
		t.Fatal(err)
	}
	up = true
	if err := metricstest.Gather(t, reg).Want("toolfleet_nats_connected", nil, 1); err != nil {
		t.Fatal(err)
	}
}

func TestServer(t *testing.T) {
	reg := metrics.NewRegistry()
	c := metrics.NewCoordinator(reg)
	c.RunStarted()
	c.RunEnded(loop.TerminationNatural)
	ready := errors.New("stream FLEET_CALLS: not found")
	srv, err := metrics.Listen(metrics.ServerConfig{
		Addr:     "127.0.0.1:0",
		Gatherer: reg,
		Healthy:  func(context.Context) error { return nil },
		Ready:    func(context.Context) error { return ready },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close(context.Background())
	base := "http://" + srv.Addr()

	tests := []struct {
		path, method string
		status       int
		body         string
	}{
		{"/healthz", "GET", 200, "ok\n"},
		{"/readyz", "GET", 503, "stream FLEET_CALLS: not found\n"},
		{"/metrics", "POST", 405, ""},
		{"/nope", "GET", 404, ""},
	}
	for _, tt := range tests {
		t.Run(tt.method+tt.path, func(t *testing.T) {
			req, _ := http.NewRequestWithContext(t.Context(), tt.method, base+tt.path, nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tt.status || (tt.body != "" && string(b) != tt.body) {
				t.Fatalf("%s %s = %d %q, want %d %q", tt.method, tt.path, resp.StatusCode, b, tt.status, tt.body)
			}
		})
	}
	if err := metricstest.Scrape(t, base+"/metrics").Want("toolfleet_coordinator_runs_total", L("reason", "natural"), 1); err != nil {
		t.Fatal(err)
	}

	if err := srv.Close(context.Background()); err != nil {
		t.Fatalf("Close = %v", err)
	}
	if err := srv.Close(context.Background()); err != nil {
		t.Fatalf("second Close = %v, want nil", err)
	}
	if _, err := http.Get(base + "/healthz"); err == nil {
		t.Fatal("the server still answers after Close")
	}
}

func TestServerBoundsTheReason(t *testing.T) {
	h := metrics.Handler(metrics.ServerConfig{
		Healthy: func(context.Context) error { return errors.New(strings.Repeat("é", 500)) },
	})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/healthz", nil))
	body := rec.Body.String()
	if rec.Code != 503 || len(body) > 300 || !strings.HasSuffix(strings.TrimSpace(body), "…") || !utf8.ValidString(body) {
		t.Fatalf("status %d, body of %d bytes: want 503 and a clipped, valid reason", rec.Code, len(body))
	}
}

func TestListenRefusesEmptyAddr(t *testing.T) {
	if _, err := metrics.Listen(metrics.ServerConfig{}); err == nil {
		t.Fatal("Listen with no address succeeded")
	}
}

// TestStreamsDriftGauge: a drifted stream and field read 1, back to 0 once
// a check of that stream finds it as expected; a check of other streams
// leaves it alone.
func TestStreamsDriftGauge(t *testing.T) {
	reg := metrics.NewRegistry()
	s := metrics.NewStreams(reg)
	s.StreamsChecked([]string{"FLEET_RESULTS", "FLEET_CALLS"}, []natsbus.Drift{{Stream: "FLEET_RESULTS", Field: "republish"}})
	f := metricstest.Gather(t, reg)
	if err := f.Want("toolfleet_stream_config_drift", L("stream", "FLEET_RESULTS", "field", "republish"), 1); err != nil {
		t.Fatal(err)
	}
	if err := f.Want("toolfleet_stream_config_checks_total", L("result", "drift"), 1); err != nil {
		t.Fatal(err)
	}
	s.StreamsChecked([]string{"FLEET_RUNS"}, nil)
	if err := metricstest.Gather(t, reg).Want("toolfleet_stream_config_drift", L("stream", "FLEET_RESULTS", "field", "republish"), 1); err != nil {
		t.Fatalf("a check of other streams cleared it: %v", err)
	}
	s.StreamsChecked([]string{"FLEET_RESULTS", "FLEET_CALLS"}, nil)
	f = metricstest.Gather(t, reg)
	if err := f.Want("toolfleet_stream_config_drift", L("stream", "FLEET_RESULTS", "field", "republish"), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Want("toolfleet_stream_config_checks_total", L("result", "ok"), 2); err != nil {
		t.Fatal(err)
	}
}
