package deploy

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// An attack (issue 24, L3): with the coordinator credential, a push
// consumer on another stream whose deliver subject the approvals stream
// captures (fleet.approval.decision.<run>.<key>) would copy stored messages
// into the audit log once something subscribes to that subject. NATS does
// not check a consumer's deliver subject against its creator's
// permissions, so the shipped configuration takes away the interest: the
// coordinator may not subscribe under fleet.approval.>, the push consumer
// stays unbound and delivers nothing, and the audit log stays as it was.
func TestHostileDeliverSubjectIntoTheAuditLog(t *testing.T) {
	t.Parallel()
	s := startFromConf(t)
	provision(t, s)
	ctx := t.Context()
	coord := connectAs(t, s, "coordinator")
	subjects := protocol.Subjects{}
	if _, err := coord.js.Publish(ctx, "fleet.result.run1.echo", []byte(`{"copied":"into the audit log"}`)); err != nil {
		t.Fatal(err)
	}
	deliver := "fleet.approval.decision.run1.key1"
	body, _ := json.Marshal(map[string]any{"stream_name": subjects.ResultsStream(), "config": map[string]any{
		"name": "copy", "deliver_subject": deliver, "ack_policy": "none", "deliver_policy": "all",
	}})
	resp, err := coord.nc.Request(fmt.Sprintf("$JS.API.CONSUMER.CREATE.%s.copy", subjects.ResultsStream()), body, 5*time.Second)
	if err != nil {
		t.Fatalf("creating the push consumer: %v", err)
	}
	var created struct {
		Error *struct{ Description string } `json:"error"`
	}
	if err := json.Unmarshal(resp.Data, &created); err != nil || created.Error != nil {
		// Refused outright is also fine: nothing can be copied then.
		t.Logf("push consumer refused: %s", resp.Data)
		return
	}
	if !refusedSub(t, coord, deliver) {
		t.Fatalf("the coordinator subscribed to %s: the push consumer delivers into the audit log", deliver)
	}
	resp, err = coord.nc.Request(fmt.Sprintf("$JS.API.CONSUMER.INFO.%s.copy", subjects.ResultsStream()), nil, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		PushBound bool `json:"push_bound"`
		Delivered struct {
			Stream uint64 `json:"stream_seq"`
		} `json:"delivered"`
	}
	if err := json.Unmarshal(resp.Data, &info); err != nil {
		t.Fatal(err)
	}
	if info.PushBound || info.Delivered.Stream != 0 {
		t.Fatalf("the push consumer is bound (%v) or delivered %d messages", info.PushBound, info.Delivered.Stream)
	}
	admin := connectAs(t, s, "admin")
	st, err := admin.js.Stream(ctx, subjects.ApprovalsStream())
	if err != nil {
		t.Fatal(err)
	}
	si, err := st.Info(ctx, jetstream.WithSubjectFilter(">"))
	if err != nil {
		t.Fatal(err)
	}
	if si.State.Msgs != 0 {
		t.Fatalf("the audit log holds %d messages (%v), want none", si.State.Msgs, si.State.Subjects)
	}
}
