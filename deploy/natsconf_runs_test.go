package deploy

import (
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/pkg/protocol"
)

func TestConfNeedsEachPassword(t *testing.T) {
	all := []string{"TOOLFLEET_ADMIN_PASSWORD", "TOOLFLEET_WORKER_DEPLOY_PASSWORD", "TOOLFLEET_LEAF_PASSWORD", "TOOLFLEET_COORDINATOR_PASSWORD", "TOOLFLEET_WORKER_PASSWORD", "TOOLFLEET_OPERATOR_PASSWORD", "TOOLFLEET_CLIENT_PASSWORD"}
	for _, unset := range all {
		t.Run(unset, func(t *testing.T) {
			for _, v := range all {
				t.Setenv(v, "tf-"+v) // restored after the test
			}
			os.Unsetenv(unset)
			if _, err := server.ProcessConfigFile("nats-server.conf"); err == nil {
				t.Fatalf("config accepted without %s", unset)
			}
		})
	}
}

// TestConfServeAndSubmit walks a served run under the shipped permissions:
// the client user submits and reads the result, the coordinator user
// answers the submission, queues the run in the runs stream, takes it and
// stores and announces its result; nobody else can forge any of it.
func TestConfServeAndSubmit(t *testing.T) {
	s := startFromConf(t)
	ctx := t.Context()
	coord := connectAs(t, s, "coordinator")
	worker := connectAs(t, s, "worker")
	op := connectAs(t, s, "operator")
	cli := connectAs(t, s, "client")
	subjects := protocol.Subjects{}
	const run = "run1"
	queue, _ := subjects.RunQueue(run)
	result, _ := subjects.ClientRunResult("client", run)
	submit, _ := subjects.RunSubmitAs("client")
	key := protocol.RunKey("client", run)

	// The admin sets up the runs stream and the bucket, the coordinator
	// the consumer.
	provision(t, s)
	kv, err := coord.js.KeyValue(ctx, subjects.RunsBucket())
	if err != nil {
		t.Fatalf("coordinator opening bucket %s: %v", subjects.RunsBucket(), err)
	}
	cons, err := coord.js.CreateOrUpdateConsumer(ctx, subjects.RunsStream(), jetstream.ConsumerConfig{
		Durable: subjects.RunsConsumer(), FilterSubject: subjects.RunQueues(), AckPolicy: jetstream.AckExplicitPolicy,
	})
	if err != nil {
		t.Fatalf("coordinator creating consumer %s: %v", subjects.RunsConsumer(), err)
	}

	// It answers submissions in the coordinators' queue group.
	queued := make(chan error, 1)
	sub, err := coord.nc.QueueSubscribe(subjects.RunSubmits(), subjects.RunSubmitGroup(), func(m *nats.Msg) {
		if _, err := coord.js.Publish(ctx, queue, m.Data); err != nil {
			queued <- err
			return
		}
		queued <- m.Respond([]byte(`{"v":1,"status":"accepted","run_id":"` + run + `"}`))
	})
	if err != nil || violated(t, coord, "Subscription", subjects.RunSubmits()) {
		t.Fatalf("coordinator subscribing to %s: %v", subjects.RunSubmits(), err)
	}
	defer sub.Unsubscribe() //nolint:errcheck
	if err := coord.nc.Flush(); err != nil {
		t.Fatal(err)
	}

	results, err := cli.nc.SubscribeSync("fleet.run.result.client.>")
	if err != nil || violated(t, cli, "Subscription", "fleet.run.result.client.>") {
		t.Fatalf("client subscribing to its results: %v", err)
	}
	reply, err := cli.nc.Request(submit, []byte(`{"prompt":"tf-canary-prompt"}`), 2*time.Second)
	if err != nil {
		t.Fatalf("client submitting a run: %v", err)
	}
	if err := <-queued; err != nil {
		t.Fatalf("coordinator queueing and answering: %v", err)
	}
	if want := `{"v":1,"status":"accepted","run_id":"run1"}`; string(reply.Data) != want {
		t.Fatalf("reply %s, want %s", reply.Data, want)
	}

	m, err := cons.Next(jetstream.FetchMaxWait(2 * time.Second))
	if err != nil {
		t.Fatalf("coordinator taking the run: %v", err)
	}
	if err := m.DoubleAck(ctx); err != nil {
		t.Fatalf("coordinator acking the run: %v", err)
	}
	if _, err := kv.Put(ctx, key, []byte(`{"v":1,"run_id":"run1"}`)); err != nil {
		t.Fatalf("coordinator storing the result: %v", err)
	}
	if err := coord.nc.Publish(result, []byte(`{"v":1,"run_id":"run1"}`)); err != nil || violated(t, coord, "Publish", result) {
		t.Fatalf("coordinator announcing the result refused: %v", err)
	}

	if _, err := results.NextMsg(2 * time.Second); err != nil {
		t.Fatalf("client did not get the announced result: %v", err)
	}
	ckv, err := cli.js.KeyValue(ctx, subjects.RunsBucket())
	if err != nil {
		t.Fatalf("client opening %s: %v", subjects.RunsBucket(), err)
	}
	if e, err := ckv.Get(ctx, key); err != nil || string(e.Value()) != `{"v":1,"run_id":"run1"}` {
		t.Fatalf("client reading the result: %v", err)
	}
	w, err := ckv.Watch(ctx, key)
	if err != nil {
		t.Fatalf("client watching the result: %v", err)
	}
	select {
	case e := <-w.Updates():
		if e == nil || string(e.Value()) != `{"v":1,"run_id":"run1"}` {
			t.Fatalf("client's watch: %v", e)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("client's watch saw nothing")
	}
	if err := w.Stop(); err != nil {
		t.Fatalf("client stopping its watch: %v", err)
	}

	t.Run("client may do nothing else", func(t *testing.T) {
		for _, subj := range []string{
			queue,                                    // skip the coordinator's checks
			"$KV." + subjects.RunsBucket() + ".run1", // forge a result
			"$KV." + subjects.RunsBucket() + "." + key,
			result,                   // forge an announcement
			subjects.RunSubmit(),     // submit without its name
			"fleet.run.submit.bob",   // submit as another client
			"fleet.run.result.bob.x", // forge another client's announcement
			// read another client's (or an unnamed) result
			"$JS.API.DIRECT.GET.KV_fleet_runs.$KV.fleet_runs.bob.run2",
			"$JS.API.DIRECT.GET.KV_fleet_runs.$KV.fleet_runs.run2",
			"$JS.API.DIRECT.GET.KV_fleet_runs",
			"$JS.API.STREAM.MSG.GET.KV_fleet_runs",
			"$JS.API.CONSUMER.CREATE.KV_fleet_runs.x.$KV.fleet_runs.>",
			"$JS.API.CONSUMER.CREATE.KV_fleet_runs.x.$KV.fleet_runs.bob.>",
			"$JS.API.CONSUMER.CREATE.KV_fleet_runs.x",
			"fleet.call.echo",
			"fleet.approval.decision.run1.key1",
			"$JS.API.STREAM.PURGE.KV_" + subjects.RunsBucket(),
			"$JS.API.STREAM.DELETE." + subjects.RunsStream(),
			"$JS.API.STREAM.CREATE." + subjects.RunsStream(),
			"$JS.API.STREAM.MSG.GET." + subjects.RunsStream(),
			"$JS.API.CONSUMER.CREATE." + subjects.RunsStream() + ".x",
			"$JS.API.STREAM.INFO.FLEET_APPROVALS",
		} {
			if !refusedPub(t, cli, subj) {
				t.Errorf("client publish on %s not refused", subj)
			}
		}
		for _, subj := range []string{subjects.RunSubmit(), subjects.RunResults(), "fleet.run.result.bob.>", "fleet.run.result.*", "fleet.run.queue.>", "fleet.call.>", "fleet.approval.>", "fleet.result.>", ">"} {
			if !refusedSub(t, cli, subj) {
				t.Errorf("client subscribe on %s not refused", subj)
			}
		}
	})

	t.Run("only clients submit", func(t *testing.T) {
		for name, c := range map[string]client{"worker": worker, "operator": op} {
			for _, subj := range []string{subjects.RunSubmit(), submit} {
				if !refusedPub(t, c, subj) {
					t.Errorf("%s publish on %s not refused", name, subj)
				}
			}
		}
	})

	t.Run("coordinator answers only what it was asked", func(t *testing.T) {
		if !refusedPub(t, coord, "_INBOX.someone.else") {
			t.Error("coordinator publish on an inbox it got no request from not refused")
		}
	})
}
