package workerbus_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolfleet/toolfleet/internal/metrics"
	"github.com/toolfleet/toolfleet/internal/metrics/metricstest"
	"github.com/toolfleet/toolfleet/internal/natsbus/bustest"
	"github.com/toolfleet/toolfleet/internal/natsbus/workerbus"
	"github.com/toolfleet/toolfleet/internal/natstest"
	"github.com/toolfleet/toolfleet/internal/tracing/tracingtest"
	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// tee hands every event to each of its observers.
type tee []workerbus.WorkerObserver

func (t tee) Observe(ev workerbus.CallEvent) {
	for _, o := range t {
		o.Observe(ev)
	}
}

// TestWorkerCountsEachFactOnceInEverySink runs calls through a real worker
// on a real server — one ok, one failed, one malformed message, one call
// past its deadline — and checks that each fact reaches each sink once:
// the observer's events, the Prometheus metrics, the tool's micro STATS
// counters, the log (one line per call, the harness writing none of its
// own, duration_ms an integer) and the delivery's span.
func TestWorkerCountsEachFactOnceInEverySink(t *testing.T) {
	exp, _ := tracingtest.Install(t)
	f := bustest.NewFleet(t)
	fail := harness.Tool{Name: "fail", Parameters: bustest.EmptyObject, Idempotent: true,
		Run: func(context.Context, json.RawMessage) (string, error) { return "", errors.New("secret-detail") }}
	// The harness logs to the worker's log: a line of its own per call
	// would show there.
	h, err := harness.New(harness.Config{Logger: f.Log.Logger()}, harness.Echo(), fail)
	if err != nil {
		t.Fatal(err)
	}
	reg := metrics.NewRegistry()
	counter := &bustest.EventCounter{}
	w, _ := f.StartWorker(t, h, workerbus.WorkerConfig{Name: "w1", Observer: tee{counter, metrics.NewWorker(reg)}})

	d, run, in := f.OpenRun(t)
	ok := bustest.NewCall(run, "echo", `{"text":"hello"}`, 10*time.Second)
	failed := bustest.NewCall(run, "fail", `{}`, 10*time.Second)
	expired := bustest.NewCall(run, "echo", `{"text":"late"}`, -time.Second)
	for _, c := range []protocol.Call{ok, failed, expired} {
		if err := d.Publish(bustest.Ctx(t), loop.Outgoing{Call: c}); err != nil {
			t.Fatalf("Publish: %v", err)
		}
	}
	callSubj, _ := f.Subjects.Call("echo", protocol.ClassInteractive, protocol.DefaultClient)
	garbage := nats.NewMsg(callSubj)
	garbage.Data = []byte(`{"v":1,`)
	garbage.Header.Set(protocol.HeaderMsgID, "garbage-1")
	if _, err := f.JS.PublishMsg(bustest.Ctx(t), garbage); err != nil {
		t.Fatal(err)
	}
	got := map[protocol.CallKey]protocol.Outcome{}
	for len(got) < 2 {
		ev := bustest.NextEvent(t, in, 10*time.Second, func(ev loop.Event) bool { return ev.Result != nil })
		got[ev.Result.CallKey] = ev.Result.Outcome
	}
	if got[ok.CallKey] != protocol.OutcomeOK || got[failed.CallKey] != protocol.OutcomeFailed {
		t.Fatalf("outcomes %v, want ok and failed", got)
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		if got := counter.Count(workerbus.CallDelivered, ""); got != 4 {
			return fmt.Errorf("%d deliveries, want 4", got)
		}
		return nil
	})
	f.WaitIdle(t, "echo")
	f.WaitIdle(t, "fail")

	// The observer: each fact once.
	for _, c := range []struct {
		kind   workerbus.CallEventKind
		reason string
		want   int64
	}{
		{workerbus.CallDelivered, "", 4},
		{workerbus.CallStarted, "", 2},
		{workerbus.CallFinished, "", 2},
		{workerbus.CallFinished, "ok", 1},
		{workerbus.CallFinished, "failed", 1},
		{workerbus.CallTerminated, "", 2},
		{workerbus.CallTerminated, workerbus.TerminatedMalformed, 1},
		{workerbus.CallTerminated, workerbus.TerminatedExpired, 1},
		{workerbus.CallSkipped, "", 0},
		{workerbus.ResultFailed, "", 0},
	} {
		if got := counter.Count(c.kind, c.reason); got != c.want {
			t.Errorf("observer: %d %s %s events, want %d", got, c.kind, c.reason, c.want)
		}
	}

	// The metrics.
	fams := metricstest.Gather(t, reg)
	L := metricstest.L
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"toolfleet_worker_calls_total", L("tool", "echo", "outcome", "ok"), 1},
		{"toolfleet_worker_calls_total", L("tool", "fail", "outcome", "failed"), 1},
		{"toolfleet_worker_call_duration_seconds", L("tool", "echo"), 1},
		{"toolfleet_worker_call_duration_seconds", L("tool", "fail"), 1},
		{"toolfleet_worker_calls_in_flight", L("tool", "echo"), 0},
		{"toolfleet_worker_calls_in_flight", L("tool", "fail"), 0},
		{"toolfleet_worker_calls_terminated_total", L("tool", "echo", "reason", "malformed"), 1},
		{"toolfleet_worker_calls_terminated_total", L("tool", "echo", "reason", "expired"), 1},
	} {
		if err := fams.Want(c.name, c.labels, c.want); err != nil {
			t.Errorf("metrics: %v", err)
		}
	}
	for _, name := range []string{"toolfleet_worker_redeliveries_total", "toolfleet_worker_result_failures_total"} {
		if fam, ok := fams[name]; ok && len(fam.GetMetric()) > 0 {
			t.Errorf("metrics: %s has %d series, want none", name, len(fam.GetMetric()))
		}
	}

	// The tool's counters, as the micro STATS answer shows them.
	echo, _ := w.ToolStats("echo")
	if echo.Delivered != 3 || echo.Calls != 1 || echo.Outcomes[protocol.OutcomeOK] != 1 || echo.Malformed != 1 ||
		echo.Expired != 1 || echo.InFlight != 0 || echo.ResultErrors != 0 || echo.Redelivered != 0 {
		t.Errorf("ToolStats(echo) = %+v, want 3 delivered, 1 ok, 1 malformed, 1 expired", echo)
	}
	fl, _ := w.ToolStats("fail")
	if fl.Delivered != 1 || fl.Calls != 1 || fl.Outcomes[protocol.OutcomeFailed] != 1 || fl.InFlight != 0 {
		t.Errorf("ToolStats(fail) = %+v, want 1 delivered, 1 failed", fl)
	}

	// The log: one line per fact, ids and durations under the shared keys.
	lines := logLines(t, f.Log.String())
	byMsg := map[string]int{}
	for _, l := range lines {
		byMsg[l["message"].(string)]++
	}
	for msg, want := range map[string]int{
		"call finished":                           2,
		"tool call":                               0,
		"terminated a malformed call":             1,
		"call expired before it started: not run": 1,
	} {
		if byMsg[msg] != want {
			t.Errorf("log: %d %q lines, want %d", byMsg[msg], msg, want)
		}
	}
	for _, c := range []protocol.Call{ok, failed, expired} {
		var of []map[string]any
		for _, l := range lines {
			if l["call_key"] == string(c.CallKey) {
				of = append(of, l)
			}
		}
		if len(of) != 1 {
			t.Errorf("log: %d lines of call %s (%s), want 1", len(of), c.CallKey, c.Tool)
			continue
		}
		l := of[0]
		if l["run_id"] != string(run) || l["tool"] != string(c.Tool) || l["worker"] != "w1" {
			t.Errorf("log: the line of call %s lacks its ids: %v", c.CallKey, l)
		}
		if c.CallKey == expired.CallKey {
			continue
		}
		n, isNum := l["duration_ms"].(json.Number)
		if _, err := n.Int64(); !isNum || err != nil {
			t.Errorf("log: duration_ms = %#v, want an integer number of milliseconds", l["duration_ms"])
		}
		if _, ok := l["args_bytes"]; !ok {
			t.Errorf("log: the line of call %s lacks the harness's fields: %v", c.CallKey, l)
		}
		if _, ok := l["args_digest"]; ok != (c.CallKey == failed.CallKey) {
			t.Errorf("log: the line of call %s has args_digest %v, want it only on the failed call's", c.CallKey, ok)
		}
	}
	if strings.Contains(f.Log.String(), "secret-detail") {
		t.Error("log: a tool's error message reached the log")
	}

	// The spans: one per delivery, each with its outcome, and an event
	// for each call that did not run.
	outcomes := map[string]int{}
	terminated := 0
	for _, s := range exp.GetSpans() {
		if !strings.HasPrefix(s.Name, "execute_tool ") {
			continue
		}
		for _, a := range s.Attributes {
			if a.Key == "toolfleet.outcome" {
				outcomes[a.Value.AsString()]++
			}
		}
		for _, e := range s.Events {
			if e.Name == workerbus.CallTerminated.String() {
				terminated++
			}
		}
	}
	if outcomes["ok"] != 1 || outcomes["failed"] != 1 || outcomes["not_run"] != 2 || terminated != 2 {
		t.Errorf("spans: outcomes %v and %d terminated events, want ok, failed, 2 not_run and 2 events", outcomes, terminated)
	}
}

// logLines decodes a JSON log, numbers kept as json.Number.
func logLines(t *testing.T, log string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(log), "\n") {
		if line == "" {
			continue
		}
		dec := json.NewDecoder(bytes.NewReader([]byte(line)))
		dec.UseNumber()
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}
