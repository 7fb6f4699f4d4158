package deploy

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolfleet/toolfleet/internal/natsbus/stores"
	"github.com/toolfleet/toolfleet/internal/natsbus/workerbus"
	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// TestHostileDeployWorkerPullTricks: the workers of one tool (user
// worker_deploy, in an account of its own) send "+NXT" — a pull request on
// the consumer an acknowledgement subject names — with a reply subject of
// their own to $JS.ACK. subjects of the runs stream's "coordinators"
// consumer and of another tool's two consumers, as an edge site did on its
// leaf link (attack 7 of issue 34). The same trick on deploy's own
// consumer is answered with deploy's call, so the mechanism works; the
// others deliver nothing, and the runs and the other tool's calls are
// still there for the coordinators and that tool's workers.
func TestHostileDeployWorkerPullTricks(t *testing.T) {
	t.Parallel()
	s := startFromConf(t)
	provision(t, s)
	subjects := protocol.Subjects{}
	admin := connectAs(t, s, "admin")
	if _, err := workerbus.ProvisionToolConsumers(t.Context(), admin.js, subjects, []string{"deploy", "calculator"}); err != nil {
		t.Fatalf("provisioning the tools' consumers: %v", err)
	}
	coord := connectAs(t, s, "coordinator")
	if _, err := stores.EnsureRunsConsumer(t.Context(), coord.js, subjects, stores.RunsConsumerConfig{AckWait: time.Minute, MaxDeliver: 5}); err != nil {
		t.Fatalf("the coordinators' consumer: %v", err)
	}
	cl := connectAs(t, s, "client")
	for i := range 2 {
		if _, err := cl.js.Publish(t.Context(), fmt.Sprintf("fleet.run.submit.client.default.order-%d", i), []byte(`{"prompt":"secret"}`)); err != nil {
			t.Fatalf("client submitting a run: %v", err)
		}
	}
	for _, subj := range []string{"fleet.call.calculator.interactive.client", "fleet.call.calculator.batch.client", "fleet.call.deploy.interactive.client"} {
		if _, err := coord.js.Publish(t.Context(), subj, []byte(`{"arguments":"secret"}`)); err != nil {
			t.Fatalf("coordinator publishing %s: %v", subj, err)
		}
	}

	deployer := connectAs(t, s, "worker_deploy")
	inbox := inboxOf("worker_deploy") + ".trick"
	// A pulled message carries its stream subject: each reply subject gets
	// a subscription of its own, to tell which pull it answers.
	tricks := map[string]*nats.Subscription{}
	for _, target := range []string{
		subjects.RunsStream() + "." + subjects.RunsConsumer(),
		subjects.CallsStream() + ".tool_calculator",
		subjects.CallsStream() + ".batch_calculator",
		// the control, sent last: the same trick on its own tool's consumer
		subjects.CallsStream() + ".tool_deploy",
	} {
		sub, err := deployer.nc.SubscribeSync(inbox + "." + target)
		if err != nil {
			t.Fatal(err)
		}
		tricks[target] = sub
		if err := deployer.nc.PublishMsg(&nats.Msg{Subject: "$JS.ACK." + target + ".1.0.0.0.0", Reply: sub.Subject, Data: []byte("+NXT")}); err != nil {
			t.Fatal(err)
		}
	}
	m, err := tricks[subjects.CallsStream()+".tool_deploy"].NextMsg(30 * time.Second)
	if err != nil {
		t.Fatalf("the trick on deploy's own consumer was not answered: %v", err)
	}
	if err := m.Term(); err != nil {
		t.Fatal(err)
	}
	for target, sub := range tricks {
		if n, _, _ := sub.Pending(); n > 0 && !strings.HasSuffix(target, ".tool_deploy") {
			t.Errorf("worker_deploy received %d messages of %s, a consumer it does not serve", n, target)
		}
	}

	// Nothing was taken, and no pull waits to take it later.
	for _, c := range []struct {
		stream, durable string
		want            uint64
	}{
		{subjects.RunsStream(), subjects.RunsConsumer(), 2},
		{subjects.CallsStream(), "tool_calculator", 1},
		{subjects.CallsStream(), "batch_calculator", 1},
	} {
		cons, err := admin.js.Consumer(t.Context(), c.stream, c.durable)
		if err != nil {
			t.Fatalf("consumer %s/%s: %v", c.stream, c.durable, err)
		}
		in := cons.CachedInfo()
		if in.NumPending != c.want || in.Delivered.Consumer != 0 || in.NumWaiting != 0 {
			t.Errorf("%s/%s after the tricks: %d pending, %d delivered, %d pulls waiting; want %d, 0, 0",
				c.stream, c.durable, in.NumPending, in.Delivered.Consumer, in.NumWaiting, c.want)
		}
	}
}

// TestOwnAccountWorkerRefusesAnotherAckWait: a worker in an account of
// its own (worker_deploy; an edge site's are the same) may not change the
// consumer "coordinator provision --tool-consumer" made for its tool, so
// an AckWait (--ack-wait) other than the provisioned one cannot be
// applied: its heartbeats would not keep a running call from being
// redelivered. The worker stops with an error naming both, and takes no
// call.
func TestOwnAccountWorkerRefusesAnotherAckWait(t *testing.T) {
	t.Parallel()
	s := startFromConf(t)
	provision(t, s)
	subjects := protocol.Subjects{}
	admin := connectAs(t, s, "admin")
	if _, err := workerbus.ProvisionToolConsumers(t.Context(), admin.js, subjects, []string{"deploy"}); err != nil {
		t.Fatalf("provisioning deploy's consumer: %v", err)
	}
	coord := connectAs(t, s, "coordinator")
	if _, err := coord.js.Publish(t.Context(), "fleet.call.deploy.interactive.client", []byte(`{}`)); err != nil {
		t.Fatalf("coordinator publishing a deploy call: %v", err)
	}
	h, err := harness.New(harness.Config{}, harness.Tool{Name: "deploy", Parameters: json.RawMessage(`{"type":"object"}`),
		Run: func(context.Context, json.RawMessage) (string, error) { return "deployed", nil }})
	if err != nil {
		t.Fatal(err)
	}
	provisioned := workerbus.DefaultAckWait
	deployer := connectAs(t, s, "worker_deploy")
	w, err := workerbus.NewWorker(deployer.nc, deployer.js, subjects, h, workerbus.WorkerConfig{
		Name: "deploy", AckWait: 6 * provisioned, NoDiscovery: true, ShutdownGrace: time.Second,
	})
	if err != nil {
		t.Fatalf("NewWorker: %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	err = w.Run(ctx)
	if err == nil || ctx.Err() != nil || !strings.Contains(err.Error(), "ack") || !strings.Contains(err.Error(), provisioned.String()) {
		t.Fatalf("a worker_deploy worker with AckWait %v against deploy's consumer provisioned with %v: Run = %v, want an error naming both", 6*provisioned, provisioned, err)
	}
	cons, err := admin.js.Consumer(t.Context(), subjects.CallsStream(), "tool_deploy")
	if err != nil {
		t.Fatal(err)
	}
	if in := cons.CachedInfo(); in.NumPending != 1 || in.Delivered.Consumer != 0 {
		t.Errorf("tool_deploy after the refused worker: %d pending, %d delivered; want 1, 0", in.NumPending, in.Delivered.Consumer)
	}
}
