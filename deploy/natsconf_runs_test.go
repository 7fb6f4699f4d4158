package deploy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/coordinator"
	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natstest"
	"github.com/toolfleet/toolfleet/pkg/model/scripted"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

func TestConfNeedsEachPassword(t *testing.T) {
	all := []string{"TOOLFLEET_ADMIN_PASSWORD", "TOOLFLEET_WORKER_DEPLOY_PASSWORD", "TOOLFLEET_LEAF_PASSWORD", "TOOLFLEET_COORDINATOR_PASSWORD", "TOOLFLEET_WORKER_PASSWORD", "TOOLFLEET_OPERATOR_PASSWORD", "TOOLFLEET_VIEWER_PASSWORD", "TOOLFLEET_CLIENT_PASSWORD"}
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
// the client user stores its submission in the runs stream and reads the
// result, the coordinator user takes it and stores and announces its
// result; nobody else can forge any of it.
func TestConfServeAndSubmit(t *testing.T) {
	t.Parallel()
	s := startFromConf(t)
	ctx := t.Context()
	coord := connectAs(t, s, "coordinator")
	worker := connectAs(t, s, "worker")
	op := connectAs(t, s, "operator")
	cli := connectAs(t, s, "client")
	subjects := protocol.Subjects{}
	submit, _ := subjects.RunSubmission("client", protocol.DefaultAgent, "sub1")
	run := protocol.SubmissionRunID("client", "sub1")
	result, _ := subjects.ClientRunResult("client", run)
	key := protocol.RunKey("client", run)

	// The admin sets up the runs stream and the bucket, the coordinator
	// the consumer.
	provision(t, s)
	kv, err := coord.js.KeyValue(ctx, subjects.RunsBucket())
	if err != nil {
		t.Fatalf("coordinator opening bucket %s: %v", subjects.RunsBucket(), err)
	}
	cons, err := coord.js.CreateOrUpdateConsumer(ctx, subjects.RunsStream(), jetstream.ConsumerConfig{
		Durable: subjects.RunsConsumer(), FilterSubjects: []string{subjects.RunsQueued(), subjects.RunSubmissions()}, AckPolicy: jetstream.AckExplicitPolicy,
	})
	if err != nil {
		t.Fatalf("coordinator creating consumer %s: %v", subjects.RunsConsumer(), err)
	}

	results, err := cli.nc.SubscribeSync("fleet.run.result.client.>")
	if err != nil || violated(t, cli, "Subscription", "fleet.run.result.client.>") {
		t.Fatalf("client subscribing to its results: %v", err)
	}
	// The client stores its submission: the server's acknowledgement is
	// the acceptance, with no coordinator involved.
	msg := nats.NewMsg(submit)
	msg.Data = []byte(`{"prompt":"tf-canary-prompt"}`)
	msg.Header.Set(protocol.HeaderMsgID, protocol.SubmissionMsgID("client", "sub1"))
	msg.Header.Set(protocol.HeaderAgent, protocol.DefaultAgent)
	if ack, err := cli.js.PublishMsg(ctx, msg); err != nil || ack.Stream != subjects.RunsStream() {
		t.Fatalf("client submitting a run: %v %v", ack, err)
	}

	m, err := cons.Next(jetstream.FetchMaxWait(2 * time.Second))
	if err != nil {
		t.Fatalf("coordinator taking the run: %v", err)
	}
	if err := m.DoubleAck(ctx); err != nil {
		t.Fatalf("coordinator acking the run: %v", err)
	}
	if sub, err := subjects.ParseStoredSubmission(m.Subject(), m.Headers().Get(protocol.HeaderMsgID), m.Headers().Get(protocol.HeaderAgent)); err != nil ||
		sub != (protocol.StoredSubmission{Client: "client", Submission: "sub1", Agent: protocol.DefaultAgent}) {
		t.Fatalf("coordinator took %s (%+v, %v), want client's sub1", m.Subject(), sub, err)
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
	// It reads the result with a direct get, the one JetStream request its
	// account imports (no bucket info, no watch: no consumer).
	get := "$JS.API.DIRECT.GET.KV_" + subjects.RunsBucket() + ".$KV." + subjects.RunsBucket() + "." + key
	if m, err := cli.nc.RequestWithContext(ctx, get, nil); err != nil || string(m.Data) != `{"v":1,"run_id":"run1"}` {
		t.Fatalf("client reading the result: %v %v", m, err)
	}
	if _, err := cli.js.KeyValue(ctx, subjects.RunsBucket()); err == nil {
		t.Fatal("client opened the bucket: its account imports no bucket info")
	}

	t.Run("client may do nothing else", func(t *testing.T) {
		for _, subj := range []string{
			"$KV." + subjects.RunsBucket() + ".run1", // forge a result
			"$KV." + subjects.RunsBucket() + "." + key,
			result,                               // forge an announcement
			"fleet.run.submit",                   // the old shared subject
			"fleet.run.submit.bob.default.x",     // submit as another client
			"fleet.run.submit.clientx.default.x", // a name that starts like its own
			"fleet.run.result.bob.x",             // forge another client's announcement
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
			// no JetStream API but its direct get: no consumer of its
			// own keys either (its deliver subject could be a fleet subject)
			"$JS.API.INFO",
			"$JS.API.STREAM.INFO.KV_fleet_runs",
			"$JS.API.CONSUMER.CREATE.KV_fleet_runs.x.$KV.fleet_runs.client.>",
			"$JS.FC.KV_fleet_runs.x",
		} {
			if !refusedPub(t, cli, subj) {
				t.Errorf("client publish on %s not refused", subj)
			}
		}
		for _, subj := range []string{"fleet.run.submit", subjects.RunResults(), "fleet.run.result.bob.>", "fleet.run.result.*", "fleet.run.queue.>", "fleet.call.>", "fleet.approval.>", "fleet.result.>", ">"} {
			if !refusedSub(t, cli, subj) {
				t.Errorf("client subscribe on %s not refused", subj)
			}
		}
	})

	t.Run("only clients submit", func(t *testing.T) {
		for name, c := range map[string]client{"worker": worker, "operator": op} {
			for _, subj := range []string{"fleet.run.submit", submit, "fleet.run.submit.worker.default.x"} {
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

// TestConfSubmissionReplyReachesNoStream is M1: a client submits runs with
// a reply subject of its choosing — an approval decision, another client's
// result key, a tool's calls — to a real serving coordinator on the
// shipped configuration. The coordinator publishes nothing there (it
// answers no submission); each run still gets its result under the
// client's own key. The server's own acknowledgement of the stored
// submission goes to the reply subject in the client's own account
// (TestHostileReflectedAcksOntoFleetSubjects): nothing at all reaches a
// target.
func TestConfSubmissionReplyReachesNoStream(t *testing.T) {
	t.Parallel()
	s := startFromConf(t)
	provision(t, s)
	ctx := t.Context()
	model, err := scripted.Parse([]byte(`{"turns": [{"content": "done"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	c, err := coordinator.Open(ctx, coordinator.Config{
		Conn:  natsbus.ConnConfig{URL: s.ClientURL(), User: "coordinator", Password: passwords["coordinator"]},
		Model: model, Logger: zerolog.Nop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sctx, stop := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- c.Serve(sctx, coordinator.ServeConfig{Name: "m1", PollWait: 100 * time.Millisecond}) }()
	defer func() { stop(); <-served }()

	admin := connectAs(t, s, "admin")
	cli := connectAs(t, s, "client")
	streams := map[string]string{ // target -> the stream that would store it
		"fleet.approval.decision.R.K":            "FLEET_APPROVALS",
		"$KV.fleet_runs.otherclient.R":           "KV_fleet_runs",
		"fleet.call.deploy":                      "FLEET_CALLS",
		"fleet.journal.cancel.R":                 "FLEET_CANCELS",
		"fleet.run.result.otherclient.R":         "",
		"fleet.run.submit.otherclient.default.R": "FLEET_RUNS",
	}
	i := 0
	for target := range streams {
		i++
		id := fmt.Sprintf("m1-%d", i)
		subject, _ := protocol.Subjects{}.RunSubmission("client", protocol.DefaultAgent, id)
		msg := nats.NewMsg(subject)
		msg.Reply = target
		msg.Data = []byte(`{"prompt":""}`) // refused: the refusal is the result
		msg.Header.Set(protocol.HeaderMsgID, protocol.SubmissionMsgID("client", id))
		msg.Header.Set(protocol.HeaderAgent, protocol.DefaultAgent)
		if err := cli.nc.PublishMsg(msg); err != nil {
			t.Fatal(err)
		}
	}
	// Every refusal is stored under the client's own key.
	kv, err := admin.js.KeyValue(ctx, "fleet_runs")
	if err != nil {
		t.Fatal(err)
	}
	for j := 1; j <= i; j++ {
		key := protocol.RunKey("client", protocol.SubmissionRunID("client", fmt.Sprintf("m1-%d", j)))
		natstest.WaitFor(t, 30*time.Second, func() error {
			e, err := kv.Get(ctx, key)
			if err != nil {
				return err
			}
			if !bytes.Contains(e.Value(), []byte(`"code":"missing_field"`)) {
				t.Fatalf("result %s = %s, want a missing_field refusal", key, e.Value())
			}
			return nil
		})
	}
	// Nothing reached any target, not even the server's acknowledgement.
	for target, stream := range streams {
		if stream == "" {
			continue
		}
		st, err := admin.js.Stream(ctx, stream)
		if err != nil {
			t.Fatal(err)
		}
		m, err := st.GetLastMsgForSubject(ctx, target)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Errorf("%s stored on %s: %s", stream, target, m.Data)
	}
}
