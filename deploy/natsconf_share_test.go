package deploy

import (
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/natsbus/workerbus"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// Fair shares and priority under the shipped configuration: a worker
// creates and pulls from a tool's two consumers (interactive and batch)
// on the new call subjects, never on deploy's (which has credentials of
// its own, and whose two consumers provision creates); worker_deploy
// looks up and pulls from deploy's two, and may not change them; the coordinator publishes calls
// per tool, class and client, and the server refuses one over the
// client's share; only admin may change the share (a stream update), and
// the coordinator, operator, worker and client are refused.
func TestConfClientShareAndClasses(t *testing.T) {
	s := startFromConf(t)
	ctx := t.Context()
	provision(t, s)
	admin := connectAs(t, s, "admin")
	subjects := protocol.Subjects{}
	if _, err := workerbus.ProvisionToolConsumers(ctx, admin.js, subjects, []string{"deploy"}); err != nil {
		t.Fatalf("admin provisioning deploy's consumers: %v", err)
	}
	calls := subjects.CallsStream()
	consumer := func(tool protocol.ToolName, class protocol.Class) jetstream.ConsumerConfig {
		name, _ := subjects.ClassConsumer(tool, class)
		filter, _ := subjects.CallsOf(tool, class)
		return jetstream.ConsumerConfig{Durable: name, FilterSubject: filter, AckPolicy: jetstream.AckExplicitPolicy}
	}

	worker := connectAs(t, s, "worker")
	for _, class := range protocol.Classes {
		if _, err := worker.js.CreateOrUpdateConsumer(ctx, calls, consumer("echo", class)); err != nil {
			t.Fatalf("worker creating echo's %s consumer: %v", class, err)
		}
		if _, err := worker.js.CreateOrUpdateConsumer(quick(t), calls, consumer("deploy", class)); err == nil {
			t.Errorf("worker created deploy's %s consumer", class)
		}
	}
	// The former subject (no class, no client) is no consumer's filter any more.
	if _, err := worker.js.CreateOrUpdateConsumer(quick(t), calls, jetstream.ConsumerConfig{Durable: "old_echo", FilterSubject: "fleet.call.echo.interactive.*", AckPolicy: jetstream.AckExplicitPolicy}); err == nil {
		t.Error("worker created a consumer on fleet.call.echo")
	}
	for _, subj := range []string{"$JS.API.CONSUMER.MSG.NEXT.FLEET_CALLS.batch_deploy", "$JS.API.CONSUMER.INFO.FLEET_CALLS.batch_deploy"} {
		if !refusedPub(t, worker, subj) {
			t.Errorf("worker publish on %s not refused", subj)
		}
	}
	// worker_deploy, in an account of its own, serves the two consumers
	// provision made and may not change them (a consumer's deliver subject
	// could name any subject of the fleet's account).
	deployWorker := connectAs(t, s, "worker_deploy")
	for _, class := range protocol.Classes {
		name, _ := subjects.ClassConsumer("deploy", class)
		if _, err := deployWorker.js.Consumer(ctx, calls, name); err != nil {
			t.Errorf("worker_deploy looking up deploy's %s consumer: %v", class, err)
		}
		if _, err := deployWorker.js.CreateOrUpdateConsumer(quick(t), calls, consumer("deploy", class)); err == nil {
			t.Errorf("worker_deploy updated deploy's %s consumer", class)
		}
	}

	// Admin sets the share to 2; nobody else may.
	st, err := admin.js.Stream(ctx, calls)
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	cfg.MaxMsgsPerSubject = 2
	for _, user := range []string{"coordinator", "operator", "worker", "client"} {
		if _, err := connectAs(t, s, user).js.UpdateStream(quick(t), cfg); err == nil {
			t.Errorf("%s changed the share", user)
		}
	}
	if _, err := admin.js.UpdateStream(ctx, cfg); err != nil {
		t.Fatalf("admin setting the share: %v", err)
	}

	coord := connectAs(t, s, "coordinator")
	acme, _ := subjects.Call("echo", protocol.ClassBatch, "acme")
	bob, _ := subjects.Call("echo", protocol.ClassBatch, "bob")
	for i := range 2 {
		if _, err := coord.js.Publish(ctx, acme, []byte(`call`)); err != nil {
			t.Fatalf("call %d of acme: %v", i, err)
		}
	}
	_, err = coord.js.Publish(ctx, acme, []byte(`call`))
	if err == nil || !strings.Contains(err.Error(), "maximum messages per subject exceeded") {
		t.Fatalf("third call of acme over a share of 2: %v, want refused per subject", err)
	}
	if _, err := coord.js.Publish(ctx, bob, []byte(`call`)); err != nil {
		t.Fatalf("bob's call while acme's share is full: %v", err)
	}
	// A worker pulls the batch calls from the batch consumer.
	cons, err := worker.js.Consumer(ctx, calls, "batch_echo")
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.FetchNoWait(3)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for m := range batch.Messages() {
		if err := m.DoubleAck(ctx); err != nil {
			t.Fatalf("worker acking a batch call: %v", err)
		}
		n++
	}
	if n != 3 {
		t.Fatalf("worker pulled %d batch calls, want 3", n)
	}
	// Acked, they left the stream: acme's share is free again.
	if _, err := coord.js.Publish(ctx, acme, []byte(`call`)); err != nil {
		t.Fatalf("acme's call once its share freed: %v", err)
	}
}
