package deploy

import (
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// TestConfStartRecords: under the shipped deploy/nats-server.conf a
// tool's workers store a non-idempotent call's start record (its claim),
// and read it back; a coordinator stores one (its withdrawal) and may
// write no execution record; the server keeps the first record of a call
// and refuses the next, whoever writes it. No worker writes the start
// records of a tool with workers of its own, nobody else writes any,
// nobody removes one, and no worker removes a message of FLEET_CALLS any
// more (a claim is a record, not a removal).
func TestConfStartRecords(t *testing.T) {
	s := startFromConf(t)
	provision(t, s)
	subjects := protocol.Subjects{}
	users := map[string]client{}
	for _, u := range []string{"admin", "coordinator", "worker", "worker_deploy", "operator", "client"} {
		users[u] = connectAs(t, s, u)
	}
	record := func(c client, subject string) error {
		msg := nats.NewMsg(subject)
		msg.Data = []byte(`{"v":1,"worker":"w1","nonce":"n"}`)
		_, err := c.js.PublishMsg(t.Context(), msg, jetstream.WithExpectStream(subjects.StartsStream()), jetstream.WithExpectLastSequencePerSubject(0))
		return err
	}
	run := protocol.NewRunID()
	echo, _ := subjects.Start("echo", run, protocol.NewCallKey())
	if err := record(users["worker"], echo); err != nil {
		t.Fatalf("worker claiming a call of echo: %v", err)
	}
	if err := record(users["coordinator"], echo); err == nil {
		t.Fatal("a second record of one call was stored")
	}
	st, err := users["worker"].js.Stream(t.Context(), subjects.StartsStream())
	if err != nil {
		t.Fatalf("worker looking up the starts stream: %v", err)
	}
	m, err := st.GetLastMsgForSubject(t.Context(), echo)
	if err != nil {
		t.Fatalf("worker reading its claim back: %v", err)
	}
	withdrawn, _ := subjects.Start("echo", run, protocol.NewCallKey())
	if err := record(users["coordinator"], withdrawn); err != nil {
		t.Fatalf("coordinator withdrawing a call of echo: %v", err)
	}
	deploy, _ := subjects.Start("deploy", run, protocol.NewCallKey())
	// deploy's own records are in a stream of its own, with no TTL
	ownDeploy, _ := subjects.OwnStart("deploy", run, protocol.NewCallKey())
	ownMsg := nats.NewMsg(ownDeploy)
	ownMsg.Data = []byte(`{"v":1,"worker":"w1","nonce":"n"}`)
	if _, err := users["worker_deploy"].js.PublishMsg(t.Context(), ownMsg, jetstream.WithExpectStream(subjects.OwnStartsStream("deploy")), jetstream.WithExpectLastSequencePerSubject(0)); err != nil {
		t.Fatalf("worker_deploy claiming a call of deploy: %v", err)
	}
	claim, _ := subjects.Claim("echo", run, protocol.NewCallKey())
	for user, subj := range map[string]string{
		"worker":        deploy,
		"worker_deploy": echo,
		"operator":      echo,
		"client":        echo,
		"coordinator":   claim, // execution records are the workers' alone
	} {
		if !refusedPub(t, users[user], subj) {
			t.Errorf("%s: publish on %s not refused", user, subj)
		}
	}
	if !refusedPub(t, users["worker_deploy"], deploy) {
		t.Error("worker_deploy may write the shared starts stream")
	}
	for _, user := range []string{"worker", "worker_deploy"} {
		if !refusedPub(t, users[user], "$JS.API.STREAM.MSG.DELETE."+subjects.CallsStream()) {
			t.Errorf("%s may still remove a message of %s", user, subjects.CallsStream())
		}
	}
	if !refusedPub(t, users["coordinator"], "$JS.API.STREAM.MSG.DELETE."+subjects.StartsStream()) {
		t.Errorf("coordinator may remove a start record")
	}
	ast, err := users["admin"].js.Stream(t.Context(), subjects.StartsStream())
	if err != nil {
		t.Fatal(err)
	}
	if err := ast.DeleteMsg(t.Context(), m.Sequence); err == nil {
		t.Error("admin removed a start record")
	}
}
