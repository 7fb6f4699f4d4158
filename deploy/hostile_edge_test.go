package deploy_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natsbus/stores"
	"github.com/toolfleet/toolfleet/internal/natsbus/workerbus"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// edgeTool is a tool the shipped edge site serves (its consumers are
// imported into the edge's account), and the edge's own pull on it is the
// control that shows the link carries pulls.
const edgeTool = "calculator"

// TestHostileEdgeSteals performs attack 7 of issue 34 against a hub
// started from cluster/nats-server.conf: an edge site, holding the leaf
// node's credentials of leaf/leafnode.conf and speaking the leaf protocol
// on its own link, sends "+NXT" to $JS.ACK.<stream>.<consumer>.… with a
// reply subject of its own (a pull request on that consumer, which
// nats-server does not check against a leaf connection's permissions) on
// the runs stream's "coordinators" consumer and on the two consumers of
// "deploy", a tool the edge does not serve, and terminates whatever it
// receives. After the same link's pull on a consumer of its own tool is
// answered: nothing of those consumers reached the edge, every run is
// still there for the coordinators, and every deploy call for deploy's
// workers.
func TestHostileEdgeSteals(t *testing.T) {
	h := startClusterConf(t)
	urls := h.urls()
	subjects := protocol.Subjects{}
	admin := connectTo(t, urls, "admin", "")
	if err := eventually(60*time.Second, func() error {
		_, err := natsbus.Provision(t.Context(), admin.js, subjects, natsbus.StreamConfig{})
		return err
	}); err != nil {
		t.Fatalf("admin provisioning the fleet: %v", err)
	}
	if _, err := workerbus.ProvisionToolConsumers(t.Context(), admin.js, subjects, []string{"deploy", edgeTool}); err != nil {
		t.Fatalf("provisioning the tools' consumers: %v", err)
	}
	coord := connectTo(t, urls, "coordinator", "")
	if _, err := stores.EnsureRunsConsumer(t.Context(), coord.js, subjects, stores.RunsConsumerConfig{AckWait: time.Minute, MaxDeliver: 5}); err != nil {
		t.Fatalf("the coordinators' consumer: %v", err)
	}

	// Three clients' runs, two interactive calls of deploy and one batch
	// call, and one call of the edge's own tool.
	client := connectTo(t, urls, "client", "")
	for i := range 3 {
		subj := fmt.Sprintf("fleet.run.submit.client.default.order-%d", i)
		if _, err := client.js.Publish(t.Context(), subj, []byte(`{"prompt":"the client's secret prompt"}`)); err != nil {
			t.Fatalf("client submitting %s: %v", subj, err)
		}
	}
	for _, subj := range []string{"fleet.call.deploy.interactive.client", "fleet.call.deploy.interactive.client", "fleet.call.deploy.batch.client", "fleet.call." + edgeTool + ".interactive.client"} {
		if _, err := coord.js.Publish(t.Context(), subj, []byte(`{"arguments":"secret"}`)); err != nil {
			t.Fatalf("coordinator publishing %s: %v", subj, err)
		}
	}

	// The edge site: the leaf node's own credentials, its own link.
	remote := leafConfOpts(t, h).LeafNode.Remotes[0].URLs[0]
	edge := dialEdgeLink(t, remote)
	inbox := "_INBOX_leaf.steal"
	edge.sub(inbox + ".>")
	edge.ping()
	targets := map[string]int{ // consumer → its messages
		subjects.RunsStream() + "." + subjects.RunsConsumer(): 3,
		subjects.CallsStream() + ".tool_deploy":               2,
		subjects.CallsStream() + ".batch_deploy":              1,
	}
	for target, n := range targets {
		for i := range n {
			edge.pub("$JS.ACK."+target+".1.0.0.0.0", fmt.Sprintf("%s.%s.%d", inbox, target, i), []byte("+NXT"))
		}
	}
	edge.ping()
	// The control, sent after the attack on the same link: a pull on the
	// edge's own tool's consumer is answered with its call.
	control := inbox + ".control"
	edge.pub("$JS.hub.API.CONSUMER.MSG.NEXT."+subjects.CallsStream()+".tool_"+edgeTool, control, []byte(`{"batch":1,"expires":20000000000}`))
	var got edgeMsg
	if err := eventually(30*time.Second, func() error {
		ms := edge.received(control)
		if len(ms) == 0 {
			return fmt.Errorf("the edge's pull on its own tool's consumer was not answered (errors: %v)", edge.errors())
		}
		got = ms[0]
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(got.reply, "$JS.ACK."+subjects.CallsStream()+".tool_"+edgeTool+".") {
		t.Fatalf("the edge's own pull delivered %q with reply %q, want a call of %s", got.data, got.reply, edgeTool)
	}
	edge.pub(got.reply, "", []byte("+ACK"))

	// What the attack took, the edge terminates, as it did against main.
	stolen := edge.received(inbox + "." + subjects.RunsStream())
	stolen = append(stolen, edge.received(inbox+"."+subjects.CallsStream())...)
	for _, m := range stolen {
		if m.reply != "" {
			edge.pub(m.reply, "", []byte("+TERM"))
		}
	}
	edge.ping()
	for _, m := range stolen {
		t.Errorf("the edge received %s (reply %s) from a consumer it does not serve", m.subject, m.reply)
	}

	// Every run is still there for the coordinators, every deploy call
	// for deploy's workers.
	deployer := connectTo(t, urls, "worker_deploy", "")
	for _, c := range []struct {
		conn            conn
		stream, durable string
		want            int
	}{
		{coord, subjects.RunsStream(), subjects.RunsConsumer(), 3},
		{deployer, subjects.CallsStream(), "tool_deploy", 2},
		{deployer, subjects.CallsStream(), "batch_deploy", 1},
	} {
		if n := fetchAll(t, c.conn.js, c.stream, c.durable, c.want); n != c.want {
			t.Errorf("%s/%s delivered %d messages to its own users after the attack, want %d", c.stream, c.durable, n, c.want)
		}
	}
}

// fetchAll pulls up to want messages from stream's consumer durable, acks
// them, and returns how many it got.
func fetchAll(t *testing.T, js jetstream.JetStream, stream, durable string, want int) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cons, err := js.Consumer(ctx, stream, durable)
	if err != nil {
		t.Fatalf("consumer %s/%s: %v", stream, durable, err)
	}
	got := 0
	for got < want {
		batch, err := cons.Fetch(want-got, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatalf("fetching from %s/%s: %v", stream, durable, err)
		}
		n := 0
		for m := range batch.Messages() {
			_ = m.Ack()
			n++
		}
		if n == 0 {
			break
		}
		got += n
	}
	return got
}
