package deploy

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// TestConfViewerReadsAndChangesNothing: under the shipped configuration
// the viewer reads everything the console shows — a run's journal and
// result, the runs list, approvals pending and decided, a tool's queue and
// pause state, its rate limit and traffic records, the agents — and every
// write it attempts is refused by the server: an approval decision, a
// cancel, a pause, a limit, a traffic record, a submission, an agent
// write, a stream change or purge, a message removal, a consumer on the
// calls, a publish or a subscription on any fleet subject. (What a
// consumer it creates on a stream it reads can still do is in
// docs/security.md, "The viewer".)
func TestConfViewerReadsAndChangesNothing(t *testing.T) {
	t.Parallel()
	s := startFromConf(t)
	provision(t, s)
	ctx := t.Context()
	subjects := protocol.Subjects{}
	coord := connectAs(t, s, "coordinator")
	worker := connectAs(t, s, "worker")
	op := connectAs(t, s, "operator")
	viewer := connectAs(t, s, "viewer")

	// What the fleet wrote: a run's journal entry and its result, an
	// approval request and its decision, a tool's consumer, a pause record,
	// a limit and an agent.
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
	} {
		writer := coord
		switch subj {
		case "fleet.approval.decision.r1.k1", "fleet.traffic.echo", "$KV.fleet_limits.limit.echo", "$KV.fleet_agents.math", "fleet.journal.cancel.r1":
			writer = op
		}
		if _, err := writer.js.Publish(ctx, subj, []byte(data)); err != nil {
			t.Fatalf("storing %s: %v", subj, err)
		}
	}
	if _, err := worker.js.CreateOrUpdateConsumer(ctx, subjects.CallsStream(), jetstream.ConsumerConfig{
		Durable: "tool_echo", FilterSubject: "fleet.call.echo.interactive.*", AckPolicy: jetstream.AckExplicitPolicy,
	}); err != nil {
		t.Fatalf("worker creating its tool consumer: %v", err)
	}

	t.Run("reads", func(t *testing.T) {
		// the runs list and a run's journal (coordinator runs list|show)
		runs, err := natsbus.ListJournals(ctx, viewer.js, subjects)
		if err != nil || runs["r1"] != 1 {
			t.Fatalf("listing the journals: %v %v", runs, err)
		}
		journal, err := viewer.js.Stream(ctx, subjects.JournalStream())
		if err != nil {
			t.Fatal(err)
		}
		if m, err := journal.GetLastMsgForSubject(ctx, "fleet.journal.run.r1"); err != nil || string(m.Data) != `{"journal":"r1"}` {
			t.Fatalf("direct get of the journal: %v", err)
		}
		// every stream it reads, through an ordered consumer filtered on
		// the stream's own subjects
		for stream, filter := range map[string]string{
			subjects.JournalStream():   "fleet.journal.run.r1",
			subjects.ApprovalsStream(): "fleet.approval.>",
			subjects.TrafficStream():   "fleet.traffic.>",
		} {
			st, err := viewer.js.Stream(ctx, stream)
			if err != nil {
				t.Fatalf("stream %s: %v", stream, err)
			}
			cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}})
			if err != nil {
				t.Fatalf("reading %s: %v", stream, err)
			}
			batch, err := cons.FetchNoWait(10)
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for range batch.Messages() {
				n++
			}
			if n == 0 {
				t.Errorf("read nothing of %s", stream)
			}
		}
		// approvals pending and decided: requests, decisions and outcomes
		// at once (the form of a consumer create without a filter)
		approvals, err := viewer.js.Stream(ctx, subjects.ApprovalsStream())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := approvals.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
			FilterSubjects: []string{"fleet.approval.request.>", "fleet.approval.outcome.>"},
		}); err != nil {
			t.Fatalf("watching requests and outcomes: %v", err)
		}
		// a run's result
		results, err := viewer.js.KeyValue(ctx, subjects.RunsBucket())
		if err != nil {
			t.Fatal(err)
		}
		if e, err := results.Get(ctx, "client.r1"); err != nil || string(e.Value()) != `{"result":"r1"}` {
			t.Fatalf("reading a result: %v", err)
		}
		// a tool's queue depth and pause state, and its limit
		if c, err := viewer.js.Consumer(ctx, subjects.CallsStream(), "tool_echo"); err != nil || c.CachedInfo().NumPending != 1 {
			t.Fatalf("the tool's consumer: %v", err)
		}
		limits, err := viewer.js.KeyValue(ctx, subjects.LimitsBucket())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := limits.Get(ctx, "limit.echo"); err != nil {
			t.Fatalf("reading a limit: %v", err)
		}
		// the agents, listed and read
		agents, err := viewer.js.KeyValue(ctx, subjects.AgentsBucket())
		if err != nil {
			t.Fatal(err)
		}
		keys, err := agents.Keys(ctx)
		if err != nil || len(keys) != 1 || keys[0] != "math" {
			t.Fatalf("listing the agents: %v %v", keys, err)
		}
		if e, err := agents.Get(ctx, "math"); err != nil || string(e.Value()) != `{"name":"math"}` {
			t.Fatalf("reading an agent: %v", err)
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
		} {
			if !refusedPub(t, viewer, subj) {
				t.Errorf("viewer publish on %s not refused (last error %v)", subj, viewer.nc.LastError())
			}
		}
		for _, subj := range []string{"fleet.>", "fleet.approval.>", "_INBOX.>", "_INBOX_operator.>", "$JS.EVENT.>"} {
			if !refusedSub(t, viewer, subj) {
				t.Errorf("viewer subscribe on %s not refused", subj)
			}
		}
		// the high-level calls fail the same way
		if _, err := viewer.js.PauseConsumer(quick(t), subjects.CallsStream(), "tool_echo", time.Now().Add(time.Hour)); err == nil {
			t.Error("viewer paused a tool")
		}
		if err := viewer.js.DeleteStream(quick(t), subjects.JournalStream()); err == nil {
			t.Error("viewer deleted the journals")
		}
		if c, err := worker.js.Consumer(ctx, subjects.CallsStream(), "tool_echo"); err != nil || c.CachedInfo().Paused {
			t.Fatalf("the tool's consumer after the viewer: paused or gone (%v)", err)
		}
	})

}
