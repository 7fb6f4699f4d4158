package deploy

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/natsbus/admission"
	"github.com/toolfleet/toolfleet/internal/natscli"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// The kill switch under the shipped configuration: only the operator (and
// admin) may pause a tool's consumer and record it; the coordinator, a
// worker and a client are refused by the server; a worker that re-creates
// the consumer (what a restarted worker does, or a hostile one) cannot lift
// the pause; the operator pauses and resumes with "coordinator tools" and
// with the nats CLI.
func TestConfToolPause(t *testing.T) {
	t.Parallel()
	s := startFromConf(t)
	ctx := t.Context()
	provision(t, s)
	worker := connectAs(t, s, "worker")
	subjects := protocol.Subjects{}
	cfg := jetstream.ConsumerConfig{Durable: "tool_echo", FilterSubject: "fleet.call.echo.interactive.*", AckPolicy: jetstream.AckExplicitPolicy}
	if _, err := worker.js.CreateOrUpdateConsumer(ctx, subjects.CallsStream(), cfg); err != nil {
		t.Fatalf("worker creating its tool consumer: %v", err)
	}
	paused := func() bool {
		t.Helper()
		c, err := worker.js.Consumer(ctx, subjects.CallsStream(), "tool_echo")
		if err != nil {
			t.Fatal(err)
		}
		return c.CachedInfo().Paused
	}

	until := time.Now().Add(time.Hour)
	for _, user := range []string{"coordinator", "worker", "client"} {
		c := connectAs(t, s, user)
		if _, err := c.js.PauseConsumer(quick(t), subjects.CallsStream(), "tool_echo", until); err == nil {
			t.Errorf("%s paused the consumer", user)
		}
		if !refusedPub(t, c, "$JS.API.CONSUMER.PAUSE.FLEET_CALLS.tool_echo") {
			t.Errorf("%s publish on the pause API not refused", user)
		}
		if !refusedPub(t, c, "fleet.traffic.echo") {
			t.Errorf("%s publish of a traffic record not refused", user)
		}
		if code, out, _ := coordinatorAs(t, s.ClientURL(), user, "tools", "pause", "echo", "--timeout", "2s"); code == 0 {
			t.Errorf("coordinator tools pause as %s: exit 0: %s", user, out)
		}
	}
	if paused() {
		t.Fatal("paused by a refused user")
	}

	if code, _, errb := coordinatorAs(t, s.ClientURL(), "operator", "tools", "pause", "echo", "--reason", "runaway cost", "--by", "ann"); code != 0 {
		t.Fatalf("coordinator tools pause as operator: exit %d: %s", code, errb)
	}
	if !paused() {
		t.Fatal("not paused")
	}
	// A worker re-creating the consumer without the pause: the server keeps it.
	if _, err := worker.js.CreateOrUpdateConsumer(ctx, subjects.CallsStream(), cfg); err != nil {
		t.Fatalf("worker updating its tool consumer: %v", err)
	}
	cfg.AckWait = 7 * time.Second
	if _, err := worker.js.CreateOrUpdateConsumer(ctx, subjects.CallsStream(), cfg); err != nil {
		t.Fatalf("worker updating its tool consumer: %v", err)
	}
	if !paused() {
		t.Fatal("a worker's consumer update lifted the pause")
	}
	if code, out, errb := coordinatorAs(t, s.ClientURL(), "operator", "tools", "status", "echo"); code != 0 || !strings.Contains(out, "echo: paused until resumed") {
		t.Fatalf("tools status: exit %d: %s%s", code, out, errb)
	}
	if code, _, errb := coordinatorAs(t, s.ClientURL(), "operator", "tools", "resume", "echo", "--reason", "fixed", "--by", "ann"); code != 0 || paused() {
		t.Fatalf("coordinator tools resume as operator: exit %d: %s", code, errb)
	}

	// The nats CLI equivalent, as docs/operations.md gives it.
	nb := natscli.Path(t)
	env := append(natscli.Env(t), "NATS_URL="+s.ClientURL(), "NATS_USER=operator", "NATS_PASSWORD="+passwords["operator"])
	for _, tc := range []struct {
		args   []string
		paused bool
	}{
		{[]string{"pub", "fleet.traffic.echo", `{"v":1,"tool":"echo","action":"pause","until":"2099-01-01T00:00:00Z","by":"ann","reason":"cli","at":"2026-01-01T00:00:00Z"}`, "-J"}, false},
		{[]string{"consumer", "pause", "FLEET_CALLS", "tool_echo", "2099-01-01 00:00:00", "-f"}, true},
		{[]string{"consumer", "resume", "FLEET_CALLS", "tool_echo", "-f"}, false},
	} {
		c := exec.CommandContext(ctx, nb, append([]string{"--inbox-prefix", inboxOf("operator")}, tc.args...)...)
		c.Env = env
		c.Stdin = strings.NewReader("")
		if b, err := runWithin(c, 20*time.Second); err != nil {
			t.Fatalf("nats %s: %v\n%s", strings.Join(tc.args, " "), err, b)
		}
		if paused() != tc.paused {
			t.Fatalf("after nats %s: paused %v, want %v", strings.Join(tc.args, " "), !tc.paused, tc.paused)
		}
	}

	// The audit log holds the three records, in order.
	op := connectAs(t, s, "operator")
	recs, err := admission.NewToolTraffic(op.js, subjects).History(ctx, "echo", 10)
	if err != nil || len(recs) != 3 {
		t.Fatalf("history: %+v, %v; want 3 records", recs, err)
	}
	for i, want := range []string{"pause:runaway cost", "resume:fixed", "pause:cli"} {
		if got := recs[i].Note.Action + ":" + recs[i].Note.Reason; got != want || recs[i].Note.By != "ann" {
			t.Errorf("record %d: %+v, want %s by ann", i, recs[i].Note, want)
		}
	}
}

// Rate limits under the shipped configuration: only the operator sets a
// tool's limit (key limit.<tool> of fleet_limits); workers and in-process
// workers of a coordinator may advance the token buckets (bucket.<tool>)
// and read the limits, never set one; a client may do neither.
func TestConfToolLimits(t *testing.T) {
	t.Parallel()
	s := startFromConf(t)
	ctx := t.Context()
	provision(t, s)
	subjects := protocol.Subjects{}
	if code, _, errb := coordinatorAs(t, s.ClientURL(), "operator", "tools", "limit", "echo", "--rate", "20", "--burst", "5", "--reason", "quota"); code != 0 {
		t.Fatalf("coordinator tools limit as operator: exit %d: %s", code, errb)
	}
	if code, out, errb := coordinatorAs(t, s.ClientURL(), "operator", "tools", "status", "echo"); !strings.Contains(out, "20 calls/s, burst 5") {
		t.Fatalf("tools status: exit %d: %s%s", code, out, errb)
	}
	for _, user := range []string{"worker", "coordinator"} {
		c := connectAs(t, s, user)
		kv, err := c.js.KeyValue(ctx, subjects.LimitsBucket())
		if err != nil {
			t.Fatalf("%s opening the limits bucket: %v", user, err)
		}
		if e, err := kv.Get(ctx, "limit.echo"); err != nil || !strings.Contains(string(e.Value()), `"rate":20`) {
			t.Errorf("%s reading the limit: %v", user, err)
		}
		if _, err := kv.Put(ctx, "bucket.echo", []byte("1")); err != nil {
			t.Errorf("%s advancing the token bucket: %v", user, err)
		}
		if _, err := kv.Put(quick(t), "limit.echo", []byte(`{"rate":1000}`)); err == nil {
			t.Errorf("%s set a limit", user)
		}
		if !refusedPub(t, c, "$KV.fleet_limits.limit.echo") {
			t.Errorf("%s publish on the limit key not refused", user)
		}
	}
	client := connectAs(t, s, "client")
	for _, subj := range []string{"$KV.fleet_limits.limit.echo", "$KV.fleet_limits.bucket.echo"} {
		if !refusedPub(t, client, subj) {
			t.Errorf("client publish on %s not refused", subj)
		}
	}
	worker := connectAs(t, s, "worker")
	if !refusedPub(t, worker, "$KV.fleet_limits.bucket.deploy") {
		t.Error("worker publish on the deploy tool's bucket not refused")
	}
}
