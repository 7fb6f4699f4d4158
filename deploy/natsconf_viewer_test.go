package deploy

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natsbus/admission"
	"github.com/toolfleet/toolfleet/internal/natsbus/stores"
	tfclient "github.com/toolfleet/toolfleet/pkg/client"
	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// storeFleetRecords stores, as the fleet's roles would, a run's journal
// entry and its result, an approval request, decision and outcome, a
// tool's consumer and a call in it, a pause record, a limit and an agent.
func storeFleetRecords(t *testing.T, coord, worker, op client) {
	t.Helper()
	ctx := t.Context()
	for subj, data := range map[string]string{
		"fleet.journal.run.r1":               `{"journal":"r1"}`,
		"fleet.approval.request.r1.k1":       `{"request":"k1"}`,
		"fleet.approval.decision.r1.k1":      `{"decision":"k1"}`,
		"fleet.traffic.echo":                 `{"paused":"echo"}`,
		"$KV.fleet_runs.client.r1":           `{"result":"r1"}`,
		"$KV.fleet_limits.limit.echo":        `{"rate":5}`,
		"$KV.fleet_agents.math":              `{"name":"math"}`,
		"fleet.approval.outcome.r1.k1":       `{"outcome":"k1"}`,
		"fleet.journal.cancel.r1":            `{}`,
		"fleet.call.echo.interactive.client": `{"call":"echo"}`,
		"$KV.fleet_tools.echo":               `{"name":"echo"}`,
	} {
		writer := coord
		switch subj {
		case "fleet.approval.decision.r1.k1", "fleet.traffic.echo", "$KV.fleet_limits.limit.echo", "$KV.fleet_agents.math", "fleet.journal.cancel.r1":
			writer = op
		case "$KV.fleet_tools.echo":
			writer = worker
		}
		if _, err := writer.js.Publish(ctx, subj, []byte(data)); err != nil {
			t.Fatalf("storing %s: %v", subj, err)
		}
	}
	if _, err := worker.js.CreateOrUpdateConsumer(ctx, protocol.Subjects{}.CallsStream(), jetstream.ConsumerConfig{
		Durable: "tool_echo", FilterSubject: "fleet.call.echo.interactive.*", AckPolicy: jetstream.AckExplicitPolicy,
	}); err != nil {
		t.Fatalf("worker creating its tool consumer: %v", err)
	}
}

// fleetState is how many messages and consumers each stream of the
// fleet's account holds, read as admin.
func fleetState(t *testing.T, admin client) map[string]string {
	t.Helper()
	out := map[string]string{}
	for name := range admin.js.StreamNames(t.Context()).Name() {
		st, err := admin.js.Stream(t.Context(), name)
		if err != nil {
			t.Fatal(err)
		}
		info := st.CachedInfo()
		out[name] = fmt.Sprintf("%d messages, last %d, %d consumers", info.State.Msgs, info.State.LastSeq, info.State.Consumers)
	}
	return out
}

// TestConfViewerReadsAndChangesNothing: under the shipped configuration
// the viewer, in its own account, reads everything the console shows with
// direct gets, stream and consumer information and single gets — a run's
// journal and result, the runs list, approvals pending and decided, the
// tools' catalog, a tool's queue and pause state, its rate limit and
// traffic records, the agents — and every write it attempts is refused by
// the server: a consumer of any kind on any stream, an approval decision,
// a cancel, a pause, a limit, a traffic record, a submission, an agent
// write, a stream change or purge, a message removal, a publish or a
// subscription on any fleet subject. The fleet's streams hold after it
// exactly what they held before.
func TestConfViewerReadsAndChangesNothing(t *testing.T) {
	t.Parallel()
	s := startFromConf(t)
	provision(t, s)
	ctx := t.Context()
	subjects := protocol.Subjects{}
	admin := connectAs(t, s, "admin")
	coord := connectAs(t, s, "coordinator")
	worker := connectAs(t, s, "worker")
	op := connectAs(t, s, "operator")
	viewer := connectAs(t, s, "viewer")
	storeFleetRecords(t, coord, worker, op)
	before := fleetState(t, admin)
	r := natsbus.NewDirectReader(viewer.js)

	t.Run("reads", func(t *testing.T) {
		// the runs list (coordinator runs list) and a run's journal
		runs, err := stores.ListJournals(ctx, viewer.js, subjects)
		if err != nil || runs["r1"] != 1 {
			t.Fatalf("listing the journals: %v %v", runs, err)
		}
		for stream, subj := range map[string]string{
			subjects.JournalStream():   "fleet.journal.run.r1",
			subjects.ApprovalsStream(): "fleet.approval.>",
		} {
			b, err := r.Next(ctx, stream, subj, 0, 10)
			if err != nil || len(b.Msgs) == 0 {
				t.Fatalf("reading %s on %s: %d messages, %v", stream, subj, len(b.Msgs), err)
			}
		}
		// a run's result, and the agents listed and read
		if data, found, err := stores.ReadRunResult(ctx, r, subjects, "client", "r1"); err != nil || !found || string(data) != `{"result":"r1"}` {
			t.Fatalf("reading a result: %s %v %v", data, found, err)
		}
		if names, err := stores.AgentNames(ctx, r, subjects); err != nil || fmt.Sprint(names) != "[math]" {
			t.Fatalf("listing the agents: %v %v", names, err)
		}
		if data, _, err := stores.ReadAgent(ctx, r, subjects, "math"); err != nil || string(data) != `{"name":"math"}` {
			t.Fatalf("reading an agent: %s %v", data, err)
		}
		// the tools: the catalog, a tool's queue depth and pause state,
		// its limit and its traffic records
		if _, err := stores.ReadCatalog(ctx, viewer.js, subjects); err != nil {
			t.Fatalf("reading the catalog: %v", err)
		}
		tt := admission.NewToolTraffic(viewer.js, subjects)
		if q, err := tt.Queue(ctx, "echo"); err != nil || q.Waiting != 1 {
			t.Fatalf("the tool's queue: %+v %v", q, err)
		}
		if _, err := tt.PauseState(ctx, "echo"); err != nil {
			t.Fatalf("the tool's pause state: %v", err)
		}
		if lim, set, err := tt.Limit(ctx, "echo"); err != nil || !set || lim.Rate != 5 {
			t.Fatalf("the tool's limit: %+v %v %v", lim, set, err)
		}
		var traffic []string
		if _, err := r.AllSingly(ctx, subjects.TrafficStream(), "fleet.traffic.>", 0, 10, func(m natsbus.DirectMsg) bool {
			traffic = append(traffic, string(m.Data))
			return true
		}); err != nil || fmt.Sprint(traffic) != `[{"paused":"echo"}]` {
			t.Fatalf("the traffic records: %v %v", traffic, err)
		}
		if err := viewer.nc.LastError(); err != nil {
			t.Fatalf("a read was refused: %v", err)
		}
	})

	t.Run("writes refused", func(t *testing.T) {
		for _, subj := range []string{
			"fleet.approval.decision.r1.k1",                   // approve
			"fleet.journal.cancel.r1",                         // cancel
			"fleet.journal.resume.r1",                         // resume a parked run
			"$JS.API.CONSUMER.PAUSE.FLEET_CALLS.tool_echo",    // pause
			"fleet.traffic.echo",                              // a traffic record
			"$KV.fleet_limits.limit.echo",                     // a limit
			"$KV.fleet_limits.bucket.echo",                    // a token bucket
			"fleet.run.submit.client.default.s1",              // submit
			"fleet.run.submit.viewer.default.s1",              // submit as itself
			"fleet.run.input.client.r1",                       // a client's input to a run
			"$KV.fleet_agents.math",                           // an agent
			"$KV.fleet_runs.client.r1",                        // a result
			"$KV.fleet_tools.echo",                            // the catalog
			"fleet.call.echo.interactive.client",              // a call
			"fleet.result.r1.echo",                            // a tool's result
			"fleet.progress.r1.k1",                            // progress
			"fleet.cancel.r1",                                 // a call's cancel
			"fleet.claim.echo.r1.k1",                          // an execution record
			"fleet.start.echo.r1.k1",                          // a start record
			"fleet.journal.run.r1",                            // a journal entry
			"fleet.approval.request.r1.k2",                    // an approval request
			"fleet.approval.outcome.r1.k1",                    // an outcome
			"fleet.run.result.client.r1",                      // a run's result announced
			"fleet.tool.echo",                                 // a tool's spec request
			"$SRV.PING",                                       // the fleet's discovery
			"$JS.API.STREAM.PURGE.FLEET_JOURNAL",              // purge
			"$JS.API.STREAM.PURGE.KV_fleet_agents",            // purge
			"$JS.API.STREAM.MSG.DELETE.FLEET_JOURNAL",         // message delete
			"$JS.API.STREAM.MSG.DELETE.FLEET_APPROVALS",       // message delete
			"$JS.API.STREAM.MSG.DELETE.KV_fleet_agents",       // message delete
			"$JS.API.STREAM.DELETE.FLEET_TRAFFIC",             // stream delete
			"$JS.API.STREAM.UPDATE.FLEET_JOURNAL",             // stream update
			"$JS.API.STREAM.CREATE.VIEWER",                    // stream create
			"$JS.API.CONSUMER.DELETE.FLEET_CALLS.tool_echo",   // a tool's consumer removed
			"$JS.API.CONSUMER.CREATE.FLEET_CALLS.tool_echo",   // or changed
			"$JS.API.CONSUMER.MSG.NEXT.FLEET_CALLS.tool_echo", // a call taken
			"$JS.ACK.FLEET_CALLS.tool_echo.1.1.1.1.1",         // or acknowledged
			// a consumer of its own on any stream it reads, push (its
			// deliver subject in the request body) or pull, named or not
			"$JS.API.CONSUMER.CREATE.FLEET_TRAFFIC",
			"$JS.API.CONSUMER.CREATE.FLEET_TRAFFIC.peek",
			"$JS.API.CONSUMER.CREATE.FLEET_TRAFFIC.peek.fleet.traffic.>",
			"$JS.API.CONSUMER.DURABLE.CREATE.FLEET_TRAFFIC.peek",
			"$JS.API.CONSUMER.CREATE.FLEET_JOURNAL.peek.fleet.journal.run.>",
			"$JS.API.CONSUMER.CREATE.FLEET_APPROVALS.peek",
			"$JS.API.CONSUMER.CREATE.KV_fleet_agents.peek",
			"$JS.API.CONSUMER.CREATE.KV_fleet_runs.peek",
			"$JS.API.CONSUMER.MSG.NEXT.FLEET_TRAFFIC.peek",
			"$JS.API.CONSUMER.MSG.NEXT.FLEET_JOURNAL.peek",
		} {
			if !refusedPub(t, viewer, subj) {
				t.Errorf("viewer publish on %s not refused (last error %v)", subj, viewer.nc.LastError())
			}
		}
		for _, subj := range []string{"fleet.>", "fleet.approval.>", "_INBOX.>", "_INBOX_operator.>", "$JS.EVENT.>", ">"} {
			if !refusedSub(t, viewer, subj) {
				t.Errorf("viewer subscribe on %s not refused", subj)
			}
		}
		// the high-level calls fail the same way
		if _, err := viewer.js.OrderedConsumer(quick(t), subjects.TrafficStream(), jetstream.OrderedConsumerConfig{}); err == nil {
			t.Error("viewer created an ordered consumer on the traffic records")
		}
		if _, err := viewer.js.PauseConsumer(quick(t), subjects.CallsStream(), "tool_echo", time.Now().Add(time.Hour)); err == nil {
			t.Error("viewer paused a tool")
		}
		if err := viewer.js.DeleteStream(quick(t), subjects.JournalStream()); err == nil {
			t.Error("viewer deleted the journals")
		}
	})

	t.Run("replies stay in its account", func(t *testing.T) {
		viewer := connectAs(t, s, "viewer") // no refusal of the writes above
		r := natsbus.NewDirectReader(viewer.js)
		// Its reads asked with their reply subject on fleet subjects that
		// streams capture: each answer lands in the viewer's account,
		// where nothing stores it.
		for _, reply := range []string{
			"fleet.journal.cancel.r1",         // FLEET_CANCELS
			"fleet.approval.decision.r1.k1",   // FLEET_APPROVALS
			"fleet.traffic.echo",              // FLEET_TRAFFIC
			"$KV.fleet_agents.math",           // an agent
			"$KV.fleet_runs.client.r1",        // a result
			"fleet.call.echo.interactive.bob", // a call
		} {
			for req, body := range map[string]string{
				"$JS.API.DIRECT.GET.FLEET_JOURNAL":     `{"seq":1}`,
				"$JS.API.DIRECT.GET.FLEET_APPROVALS":   `{"next_by_subj":"fleet.approval.>","batch":10}`,
				"$JS.API.DIRECT.GET.KV_fleet_runs":     `{"multi_last":["$KV.fleet_runs.>"]}`,
				"$JS.API.DIRECT.GET.KV_fleet_agents":   `{"seq":1,"no_hdr":true}`,
				"$JS.API.STREAM.MSG.GET.FLEET_TRAFFIC": `{"seq":1}`,
				"$JS.API.STREAM.INFO.FLEET_JOURNAL":    ``,
			} {
				if err := viewer.nc.PublishRequest(req, reply, []byte(body)); err != nil {
					t.Fatal(err)
				}
			}
		}
		// Answered: a read asked after them on its own inbox comes back,
		// and the server has sent every earlier one.
		if _, err := r.Next(ctx, subjects.JournalStream(), ">", 0, 1); err != nil {
			t.Fatalf("a read after them: %v", err)
		}
		if err := viewer.nc.LastError(); err != nil {
			t.Fatalf("a read was refused: %v", err)
		}
	})

	if after := fleetState(t, admin); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("the fleet's streams changed under the viewer:\nbefore %v\nafter  %v", before, after)
	}
}

// TestHostileViewerPushConsumerOntoACancelSubject is the attack that kept
// the viewer out of the fleet's account, against the shipped
// configuration: while a coordinator serves a client's run whose call a
// worker is running, the viewer creates a push consumer on FLEET_TRAFFIC
// (which holds a pause record) whose deliver subject is that run's call
// cancel subject, fleet.cancel.<run>, and a pull consumer beside it. The
// server refuses both: no consumer exists on any stream, the call is never
// cancelled, and the run finishes with its answer.
func TestHostileViewerPushConsumerOntoACancelSubject(t *testing.T) {
	t.Parallel()
	s := startFromConf(t)
	provision(t, s)
	ctx := t.Context()
	subjects := protocol.Subjects{}
	admin := connectAs(t, s, "admin")
	op := connectAs(t, s, "operator")
	viewer := connectAs(t, s, "viewer")
	if _, err := op.js.Publish(ctx, "fleet.traffic.slow", []byte(`{"v":1,"tool":"slow","action":"pause","by":"alice","reason":"x"}`)); err != nil {
		t.Fatal(err)
	}

	started, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	var cancelled atomic.Bool
	slow := harness.Tool{Name: "slow", Parameters: json.RawMessage(`{"type":"object"}`),
		Run: func(ctx context.Context, _ json.RawMessage) (string, error) {
			once.Do(func() { close(started) })
			select {
			case <-release:
				return "slept", nil
			case <-ctx.Done():
				cancelled.Store(true)
				return "", ctx.Err()
			}
		}}
	toolsFleet(t, func(user string) client { return connectAs(t, s, user) }, "worker", slow)
	// the tool in the catalog, as toolworker publishes it
	h, err := harness.New(harness.Config{}, slow)
	if err != nil {
		t.Fatal(err)
	}
	if err := stores.PublishSpecs(ctx, connectAs(t, s, "worker").js, subjects, h.Specs(), zerolog.Nop()); err != nil {
		t.Fatal(err)
	}
	serveRuns(t, s, `{"turns": [{"tool_calls": [{"id": "c1", "name": "slow", "arguments": {}}]}, {"content": "done"}]}`)

	cl := connectAs(t, s, "client")
	bc, err := tfclient.New(cl.nc, tfclient.Config{})
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithTimeout(ctx, time.Minute)
	defer stop()
	run, err := bc.Submit(wctx, tfclient.Request{Prompt: "go", ID: "slow-1"})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case <-wctx.Done():
		t.Fatal("the run's call never started")
	}

	deliver := "fleet.cancel." + string(run.ID)
	traffic := subjects.TrafficStream()
	for _, c := range []struct {
		api string
		cfg map[string]any
	}{
		// the attack as it was done: filtered on the stream's own
		// subjects, delivering onto the run's cancel subject
		{"$JS.API.CONSUMER.CREATE." + traffic + ".push.fleet.traffic.>", map[string]any{"name": "push", "deliver_subject": deliver,
			"filter_subject": "fleet.traffic.>", "ack_policy": "none", "deliver_policy": "all"}},
		{"$JS.API.CONSUMER.CREATE." + traffic + ".push2", map[string]any{"name": "push2", "deliver_subject": deliver,
			"ack_policy": "none", "deliver_policy": "all"}},
		{"$JS.API.CONSUMER.CREATE." + traffic + ".pull", map[string]any{"name": "pull", "ack_policy": "explicit", "deliver_policy": "all"}},
		{"$JS.API.CONSUMER.CREATE." + traffic, map[string]any{"deliver_subject": deliver, "ack_policy": "none", "deliver_policy": "all"}},
	} {
		body, _ := json.Marshal(map[string]any{"stream_name": traffic, "config": c.cfg})
		if _, err := viewer.nc.Request(c.api, body, 2*time.Second); err == nil {
			t.Errorf("the viewer's consumer create %s was answered", c.api)
		}
		if !violated(t, viewer, "Publish", c.api) {
			t.Errorf("the viewer's consumer create %s was not refused", c.api)
		}
	}
	if _, err := viewer.js.CreateConsumer(quick(t), traffic, jetstream.ConsumerConfig{
		Name: "push3", DeliverSubject: deliver, AckPolicy: jetstream.AckNonePolicy,
	}); err == nil {
		t.Error("the viewer created a push consumer through the JetStream API")
	}
	if st, err := admin.js.Stream(ctx, subjects.TrafficStream()); err != nil || st.CachedInfo().State.Consumers != 0 {
		t.Errorf("%s after the viewer: %v consumers (%v), want none", subjects.TrafficStream(), st.CachedInfo().State.Consumers, err)
	}

	close(release)
	res, err := bc.Wait(wctx, run)
	if err != nil || res.Answer != "done" || res.TerminationReason != "natural" || cancelled.Load() {
		t.Fatalf("the run after the attack: %+v, %v, its call cancelled %v; want it finished with its answer", res, err, cancelled.Load())
	}
	lr, err := tfclient.LoopResult(res)
	if err != nil || len(lr.Calls) != 1 || lr.Calls[0].Outcome != protocol.OutcomeOK {
		t.Fatalf("the run's call: %+v, %v; want ok", lr, err)
	}
}
