package deploy_test

import (
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/deploy"
	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natsbus/workerbus"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// Record bounds small enough that an edge's flood reaches them in a
// moment, provisioned through the same code path as the defaults.
const (
	edgeMaxClaims      = 500
	edgeStartsMaxBytes = 64 << 10
	edgeFloodRecords   = 2_000
)

// TestHostileEdgeRecordsFillOnlyItsTools: an edge site, with the leaf
// node's credentials of leaf/leafnode.conf on its own link to a hub
// started from cluster/nats-server.conf, floods execution and start
// records of its own tool (calculator). On the shared subjects
// (fleet.claim.calculator.>, fleet.start.calculator.>) nothing is stored:
// the edge's account imports only its tools' own record subjects. On
// those, fleet.own.calculator.>, the flood fills FLEET_CLAIMS_calculator
// and FLEET_STARTS_calculator to their bounds, and the server refuses the
// next record. An operator-approved call and a non-idempotent call of
// other tools, served on the hub by the shared worker, still run.
func TestHostileEdgeRecordsFillOnlyItsTools(t *testing.T) {
	h := startClusterConf(t)
	urls := h.urls()
	subjects := protocol.Subjects{}
	admin := connectTo(t, urls, "admin", "")
	// "coordinator provision --tool-consumer deploy,calculator,echo", with
	// small record bounds.
	cfg := natsbus.StreamConfig{OwnRecordTools: []string{"deploy", edgeTool, "echo"}, MaxClaims: edgeMaxClaims, StartsMaxBytes: edgeStartsMaxBytes}
	if err := eventually(60*time.Second, func() error {
		_, err := natsbus.Provision(t.Context(), admin.js, subjects, cfg)
		return err
	}); err != nil {
		t.Fatalf("admin provisioning the fleet: %v", err)
	}
	if _, err := workerbus.ProvisionToolConsumers(t.Context(), admin.js, subjects, []string{"deploy", edgeTool, "echo"}); err != nil {
		t.Fatalf("provisioning the tools' consumers: %v", err)
	}
	call := deploy.OtherToolsFleet(t, func(user string) (*nats.Conn, jetstream.JetStream) {
		c := connectTo(t, urls, user, "")
		return c.nc, c.js
	})

	remote := leafConfOpts(t, h).LeafNode.Remotes[0].URLs[0]
	edge := dialEdgeLink(t, remote)
	inbox := "_INBOX_leaf.records"
	edge.sub(inbox + ".>")
	edge.ping()
	record := []byte(`{"v":1,"worker":"edge","nonce":"n"}`)
	floodEdge := func(subject string) {
		for i := range edgeFloodRecords {
			edge.pub(fmt.Sprintf("%s.x%d.y%d", subject, i, i), "", record)
		}
		edge.ping()
	}

	// The shared streams: refused; the hub closes a link that sends what
	// its user may not publish, so each attempt has a link of its own.
	for _, shared := range []string{"fleet.claim." + edgeTool + ".x.y", "fleet.start." + edgeTool + ".x.y"} {
		if !refusedOnLink(t, remote, shared, record) {
			t.Errorf("the edge's record on %s was not refused", shared)
		}
	}
	// The tool's own streams: filled to their bounds, then refused.
	for _, own := range []struct{ subject, stream string }{
		{"fleet.own." + edgeTool + ".claim", subjects.OwnClaimsStream(edgeTool)},
		{"fleet.own." + edgeTool + ".start", subjects.OwnStartsStream(edgeTool)},
	} {
		floodEdge(own.subject)
		// One more, answered: the server stores a link's records in order.
		reply := inbox + "." + own.stream
		edge.pub(own.subject+".x.last", reply, record)
		var ack edgeMsg
		if err := eventually(60*time.Second, func() error {
			ms := edge.received(reply)
			if len(ms) == 0 {
				return fmt.Errorf("no answer to the edge's last record in %s (errors: %v)", own.stream, edge.errors())
			}
			ack = ms[0]
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(ack.data), `"err_code":10077`) {
			t.Errorf("the edge's record past its flood in %s: %s, want refused (the stream is full)", own.stream, ack.data)
		}
	}
	if n := msgs(t, admin, subjects.OwnClaimsStream(edgeTool)); n != edgeMaxClaims {
		t.Errorf("%s holds %d records, want its bound %d", subjects.OwnClaimsStream(edgeTool), n, edgeMaxClaims)
	}
	for _, shared := range []string{subjects.ClaimsStream(), subjects.StartsStream()} {
		if n := msgs(t, admin, shared); n != 0 {
			t.Errorf("the shared %s holds %d of the edge's records, want 0", shared, n)
		}
	}

	for _, tool := range []protocol.ToolName{"release", "charge"} {
		if res := call(tool); res.Outcome != protocol.OutcomeOK {
			t.Errorf("a call of %s (approved or non-idempotent) after the edge's flood: %s (%s), want ok", tool, res.Outcome, res.ErrorType)
		}
	}
}

// refusedOnLink sends one message on subject on an edge link of its own
// and reports whether the hub refused it: it closed the link for a
// publish permissions violation instead of answering the PING that
// follows the message.
func refusedOnLink(t *testing.T, remote *url.URL, subject string, data []byte) bool {
	t.Helper()
	l := dialEdgeLink(t, remote)
	l.pub(subject, "", data)
	l.send("PING\r\n")
	select {
	case <-l.pongs:
		return false
	case <-l.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("edge link: neither a PONG nor a close after a message on %s", subject)
	}
	for _, e := range l.errors() {
		if strings.Contains(e, "Permissions Violation for Publish") {
			return true
		}
	}
	return false
}
