package deploy

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natsbus/workerbus"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// fleetRoles are the users of nats-server.conf that fleet processes and
// people run as; admin provisions only.
var fleetRoles = []string{"coordinator", "worker", "operator", "viewer", "client"}

// streamAttacks are the rewrites of a stream's configuration that turn
// "may update a stream" into "may publish or read anything" or erase it
// (see docs/security.md).
var streamAttacks = map[string]func(c *jetstream.StreamConfig){
	"republish": func(c *jetstream.StreamConfig) {
		c.RePublish = &jetstream.RePublish{Source: ">", Destination: "fleet.approval.decision.>"}
	},
	"sources":          func(c *jetstream.StreamConfig) { c.Sources = []*jetstream.StreamSource{{Name: "FLEET_APPROVALS"}} },
	"subjects":         func(c *jetstream.StreamConfig) { c.Subjects = append(slices.Clone(c.Subjects), "fleet.run.submit") },
	"max_msgs":         func(c *jetstream.StreamConfig) { c.MaxMsgs = 1 },
	"max_age":          func(c *jetstream.StreamConfig) { c.MaxAge = time.Second; c.Duplicates = time.Second },
	"duplicate_window": func(c *jetstream.StreamConfig) { c.Duplicates = time.Second },
	"retention":        func(c *jetstream.StreamConfig) { c.Retention = jetstream.InterestPolicy },
	"deny_delete":      func(c *jetstream.StreamConfig) { c.DenyDelete = false; c.DenyPurge = false },
}

// TestHostileStreamRewrites: with each fleet role's credentials, every
// way of creating, reconfiguring, deleting or purging every stream and
// bucket of the fleet — and creating a new stream that mirrors or sources
// one — is refused by the server, both on the API subject and through the
// JetStream client; afterwards every stream still has exactly its expected
// configuration.
func TestHostileStreamRewrites(t *testing.T) {
	t.Parallel()
	s := startFromConf(t)
	provision(t, s)
	subjects := protocol.Subjects{}
	list := natsbus.FleetStreams(subjects, natsbus.StreamConfig{})
	conns := map[string]client{}
	for _, role := range fleetRoles {
		conns[role] = connectAs(t, s, role)
	}

	t.Run("API subjects", func(t *testing.T) {
		for _, role := range fleetRoles {
			c := conns[role]
			for _, fs := range list {
				for _, api := range []string{"CREATE", "UPDATE", "DELETE", "PURGE", "RESTORE", "SNAPSHOT"} {
					subj := "$JS.API.STREAM." + api + "." + fs.Config.Name
					if !refusedPub(t, c, subj) {
						t.Errorf("%s: publish on %s not refused", role, subj)
					}
				}
			}
			// A stream of its own that mirrors or sources a fleet stream.
			if !refusedPub(t, c, "$JS.API.STREAM.CREATE.STOLEN") {
				t.Errorf("%s: creating a stream of its own not refused", role)
			}
		}
	})

	t.Run("JetStream client", func(t *testing.T) {
		// Every attack at once (each request waits for an answer the server
		// never sends to a refused publish).
		var wg sync.WaitGroup
		var mu sync.Mutex
		succeeded := map[string]bool{}
		for _, role := range fleetRoles {
			c := conns[role]
			for _, fs := range list {
				for kind, attack := range streamAttacks {
					bad := fs.Config
					attack(&bad)
					wg.Go(func() {
						ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
						defer cancel()
						if _, err := c.js.UpdateStream(ctx, bad); err == nil {
							mu.Lock()
							succeeded[role+" "+kind+" "+fs.Config.Name] = true
							mu.Unlock()
						}
					})
				}
				wg.Go(func() {
					ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
					defer cancel()
					for _, cfg := range []jetstream.StreamConfig{
						{Name: "STOLEN_M", Mirror: &jetstream.StreamSource{Name: fs.Config.Name}},
						{Name: "STOLEN_S", Sources: []*jetstream.StreamSource{{Name: fs.Config.Name}}},
					} {
						if _, err := c.js.CreateStream(ctx, cfg); err == nil {
							mu.Lock()
							succeeded[role+" "+cfg.Name+" of "+fs.Config.Name] = true
							mu.Unlock()
						}
					}
				})
			}
		}
		wg.Wait()
		for what := range succeeded {
			t.Errorf("accepted: %s", what)
		}
	})

	// Not even the provisioning identity may erase the audit log.
	admin := connectAs(t, s, "admin")
	for _, subj := range []string{
		"$JS.API.STREAM.DELETE.FLEET_APPROVALS", "$JS.API.STREAM.PURGE.FLEET_APPROVALS", "$JS.API.STREAM.MSG.DELETE.FLEET_APPROVALS",
	} {
		if !refusedPub(t, admin, subj) {
			t.Errorf("admin: publish on %s not refused", subj)
		}
	}

	// Nothing changed: the fleet's own check finds every stream as expected.
	g := natsbus.NewStreamGuard(admin.js, natsbus.StreamGuardConfig{Streams: list})
	if err := g.Check(t.Context()); err != nil {
		t.Fatalf("after the attacks: %v", err)
	}
	if _, err := admin.js.Stream(t.Context(), "STOLEN_M"); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Errorf("stream STOLEN_M: %v, want not found", err)
	}
}

// TestHostileInboxSniffing: no role may read replies meant for another —
// not the shared _INBOX.>, not another role's prefix, not everything — and
// each role's own replies still work on its own prefix.
// ownResultGet is a direct get of a result key of the client's own.
const ownResultGet = "$JS.API.DIRECT.GET.KV_fleet_runs.$KV.fleet_runs.client.none"

func TestHostileInboxSniffing(t *testing.T) {
	t.Parallel()
	s := startFromConf(t)
	provision(t, s)
	for _, role := range append([]string{"admin"}, fleetRoles...) {
		c := connectAs(t, s, role)
		for _, subj := range []string{"_INBOX.>", "_INBOX.*", ">", "_INBOX_*.>"} {
			if !refusedSub(t, c, subj) {
				t.Errorf("%s: subscribe on %s not refused", role, subj)
			}
		}
		for _, other := range append([]string{"admin"}, fleetRoles...) {
			if other == role {
				continue
			}
			if subj := inboxOf(other) + ".>"; !refusedSub(t, c, subj) {
				t.Errorf("%s: subscribe on %s not refused", role, subj)
			}
		}
		// Its own inbox answers: a JetStream API request round trip (for
		// the client, the one its account imports: a direct get of a key
		// of its own, not found).
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		var err error
		if role == "client" {
			var m *nats.Msg
			if m, err = c.nc.RequestWithContext(ctx, ownResultGet, nil); err == nil && m.Header.Get("Status") != "404" {
				err = fmt.Errorf("direct get answered %v, want 404", m.Header)
			}
		} else {
			_, err = c.js.AccountInfo(ctx)
		}
		cancel()
		if err != nil {
			t.Errorf("%s: a request on its own inbox failed: %v", role, err)
		}
	}

	// A connection on the default inbox gets no replies at all.
	nc, err := nats.Connect(s.ClientURL(), nats.UserInfo("client", passwords["client"]),
		nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, err := nc.Request(ownResultGet, nil, 500*time.Millisecond); err == nil {
		t.Error("a request with the default _INBOX prefix was answered")
	}
}

// TestHostileWorkerAndClient: a worker cannot publish calls, cancels or
// approvals, read results or the run queue, or consume the approvals
// stream; it reads an approval decision back by sequence only. A client
// cannot read calls, results, approvals or the run queue, nor publish
// anything but a submission.
func TestHostileWorkerAndClient(t *testing.T) {
	t.Parallel()
	s := startFromConf(t)
	provision(t, s)
	worker := connectAs(t, s, "worker")
	cli := connectAs(t, s, "client")
	op := connectAs(t, s, "operator")

	for _, subj := range []string{
		"fleet.call.deploy", "fleet.cancel.run1.key1", "fleet.approval.decision.run1.key1",
		"fleet.approval.outcome.run1.key1", "fleet.run.queue.run1", "fleet.run.result.run1",
		"$KV.fleet_runs.run1",
		"$JS.API.CONSUMER.CREATE.FLEET_APPROVALS.x.fleet.approval.>",
		"$JS.API.CONSUMER.CREATE.FLEET_RESULTS.x.fleet.result.>",
		"$JS.API.CONSUMER.CREATE.FLEET_RUNS.x.fleet.run.queue.*",
		"$JS.API.CONSUMER.CREATE.KV_fleet_runs.x.$KV.fleet_runs.>",
		"$JS.API.CONSUMER.CREATE.FLEET_CALLS.x",
		// a push consumer on the bucket it writes would deliver its own
		// content anywhere (an approval decision subject) with the
		// server's authority
		"$JS.API.CONSUMER.CREATE.KV_fleet_tools.x.$KV.fleet_tools.x",
		"$JS.API.CONSUMER.CREATE.KV_fleet_tools.x",
		"$JS.API.DIRECT.GET.FLEET_APPROVALS.fleet.approval.request.run1.key1",
		"$JS.API.DIRECT.GET.KV_fleet_runs",
		"$JS.API.STREAM.MSG.GET.FLEET_RESULTS",
		"$JS.API.STREAM.MSG.DELETE.FLEET_APPROVALS",
		"$JS.API.STREAM.MSG.DELETE.FLEET_RESULTS",
	} {
		if !refusedPub(t, worker, subj) {
			t.Errorf("worker: publish on %s not refused", subj)
		}
	}
	for _, subj := range []string{"fleet.result.>", "fleet.call.>", "fleet.approval.>", "fleet.run.>", "$KV.>"} {
		if !refusedSub(t, worker, subj) {
			t.Errorf("worker: subscribe on %s not refused", subj)
		}
	}

	// The operator's decision, stored in the audit log; the worker reads
	// it back by its sequence, as a call's approval proof is checked.
	ack, err := op.js.Publish(t.Context(), "fleet.approval.decision.run1.key1", []byte(`{"approved":true}`))
	if err != nil {
		t.Fatalf("operator decision: %v", err)
	}
	st, err := worker.js.Stream(t.Context(), "FLEET_APPROVALS")
	if err != nil {
		t.Fatalf("worker: stream info of FLEET_APPROVALS: %v", err)
	}
	m, err := st.GetMsg(t.Context(), ack.Sequence)
	if err != nil || string(m.Data) != `{"approved":true}` {
		t.Fatalf("worker: reading the decision back by sequence: %v %q", err, m.Data)
	}
	if !refusedPub(t, worker, "$JS.API.DIRECT.GET.FLEET_APPROVALS.fleet.approval.decision.run1.key1") {
		t.Error("worker: direct get by subject not refused")
	}

	for _, subj := range []string{
		"fleet.call.deploy", "fleet.result.run1", "fleet.cancel.run1.key1", "fleet.approval.decision.run1.key1",
		"fleet.run.queue.run1", "$KV.fleet_runs.run1", "$KV.fleet_tools.evil",
		"$JS.API.STREAM.INFO.FLEET_CALLS", "$JS.API.STREAM.INFO.FLEET_APPROVALS",
		"$JS.API.CONSUMER.CREATE.FLEET_RESULTS.x.fleet.result.>",
		"$JS.API.CONSUMER.CREATE.FLEET_APPROVALS.x.fleet.approval.>",
		"$JS.API.CONSUMER.CREATE.KV_fleet_runs.x",
	} {
		if !refusedPub(t, cli, subj) {
			t.Errorf("client: publish on %s not refused", subj)
		}
	}
	for _, subj := range []string{"fleet.result.>", "fleet.call.>", "fleet.approval.>", "fleet.run.queue.>", "fleet.cancel.>"} {
		if !refusedSub(t, cli, subj) {
			t.Errorf("client: subscribe on %s not refused", subj)
		}
	}
}

// TestHostileWorkerOfAnotherTool: the generic worker (calculator, echo,
// ...) cannot take, answer or describe the calls of "deploy", whose
// workers have credentials of their own — not through deploy's consumer,
// nor a consumer of its own filtered on deploy's calls or on every call
// (the calls stream is a work queue, and provision created deploy's
// consumer first), nor by publishing deploy's results or catalog entry;
// and deploy's workers serve deploy only.
func TestHostileWorkerOfAnotherTool(t *testing.T) {
	t.Parallel()
	s := startFromConf(t)
	provision(t, s)
	admin := connectAs(t, s, "admin")
	subjects := protocol.Subjects{}
	if _, err := workerbus.ProvisionToolConsumers(t.Context(), admin.js, subjects, []string{"deploy"}); err != nil {
		t.Fatalf("provisioning deploy's consumer: %v", err)
	}
	worker := connectAs(t, s, "worker")
	deployer := connectAs(t, s, "worker_deploy")
	coord := connectAs(t, s, "coordinator")

	for _, subj := range []string{
		"$JS.API.CONSUMER.CREATE.FLEET_CALLS.tool_deploy.fleet.call.deploy",
		"$JS.API.CONSUMER.CREATE.FLEET_CALLS.x.fleet.call.deploy",
		"$JS.API.CONSUMER.INFO.FLEET_CALLS.tool_deploy",
		"$JS.API.CONSUMER.MSG.NEXT.FLEET_CALLS.tool_deploy",
		"$JS.ACK.FLEET_CALLS.tool_deploy.1.1.1.1.0",
		"fleet.result.run1.deploy",
		"$KV.fleet_tools.deploy",
	} {
		if !refusedPub(t, worker, subj) {
			t.Errorf("worker: publish on %s not refused", subj)
		}
	}
	if !refusedSub(t, worker, "fleet.tool.deploy") {
		t.Error("worker: subscribe on fleet.tool.deploy (deploy's discovery endpoint) not refused")
	}
	// A consumer of its own on every call: the permission allows the
	// subject form, the work queue refuses the overlap with deploy's.
	if _, err := worker.js.CreateConsumer(t.Context(), subjects.CallsStream(), jetstream.ConsumerConfig{
		Durable: "sniff", FilterSubject: "fleet.call.>", AckPolicy: jetstream.AckExplicitPolicy,
	}); err == nil {
		t.Error("worker: a consumer of every call was created")
	}
	// It still serves its own tools.
	if _, err := worker.js.CreateOrUpdateConsumer(t.Context(), subjects.CallsStream(), jetstream.ConsumerConfig{
		Durable: "tool_calculator", FilterSubject: "fleet.call.calculator.interactive.*", AckPolicy: jetstream.AckExplicitPolicy,
	}); err != nil {
		t.Fatalf("worker: its own tool's consumer: %v", err)
	}

	// deploy's workers: deploy's calls and results, nothing else.
	if _, err := coord.js.Publish(t.Context(), "fleet.call.deploy.interactive.local", []byte(`call`)); err != nil {
		t.Fatal(err)
	}
	cons, err := deployer.js.Consumer(t.Context(), subjects.CallsStream(), "tool_deploy")
	if err != nil {
		t.Fatalf("worker_deploy: its consumer: %v", err)
	}
	m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
	if err != nil || string(m.Data()) != "call" {
		t.Fatalf("worker_deploy: pulling deploy's call: %v", err)
	}
	if err := m.Ack(); err != nil {
		t.Fatal(err)
	}
	if _, err := deployer.js.Publish(t.Context(), "fleet.result.run1.deploy", []byte(`r`)); err != nil {
		t.Fatalf("worker_deploy: publishing deploy's result: %v", err)
	}
	for _, subj := range []string{
		"fleet.result.run1.calculator",
		"$JS.API.CONSUMER.MSG.NEXT.FLEET_CALLS.tool_calculator",
		"$JS.API.CONSUMER.CREATE.FLEET_CALLS.tool_calculator.fleet.call.calculator",
		"$KV.fleet_tools.calculator",
	} {
		if !refusedPub(t, deployer, subj) {
			t.Errorf("worker_deploy: publish on %s not refused", subj)
		}
	}
}
