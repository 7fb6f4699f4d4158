package stores_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/approval"
	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natstest"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// A flood (issue 24, M3): the approvals stream is bounded, and when full it
// keeps the audit log honest and fails closed — it refuses what is new
// rather than forget what was recorded, and a gated call whose request
// cannot be stored is not approved.
func TestApprovalsStreamIsBoundedAndFailsClosed(t *testing.T) {
	if c := natsbus.FleetStreams(protocol.Subjects{}, natsbus.StreamConfig{}); !slices.ContainsFunc(c, func(fs natsbus.FleetStream) bool {
		return fs.Config.Name == "FLEET_APPROVALS" && fs.Config.MaxBytes == natsbus.DefaultApprovalsMaxBytes &&
			fs.Config.MaxMsgs == natsbus.DefaultApprovalsMaxMsgs && fs.Config.Discard == jetstream.DiscardNew
	}) {
		t.Fatal("FLEET_APPROVALS is not bounded by default with discard new")
	}
	srv := natstest.Start(t)
	nc := natstest.Connect(t, srv)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	s := protocol.Subjects{}
	if _, err := natsbus.ProvisionStreams(ctx, js, natsbus.FleetStreams(s, natsbus.StreamConfig{ApprovalsMaxMsgs: 3})); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := js.Publish(ctx, fmt.Sprintf("fleet.approval.request.run%d.key%d", i, i), []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := js.Publish(ctx, "fleet.approval.request.run9.key9", []byte(`{}`)); err == nil {
		t.Fatal("a full approvals stream stored one more entry")
	}
	st, err := js.Stream(ctx, s.ApprovalsStream())
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil || info.State.FirstSeq != 1 || info.State.Msgs != 3 {
		t.Fatalf("approvals stream %+v, %v: want the first three entries kept", info.State, err)
	}
	gate := approval.NewGate(nc, js, s, approval.GateConfig{})
	req := protocol.ApprovalRequest{V: protocol.Version, RunID: protocol.NewRunID(), CallKey: protocol.NewCallKey(),
		Tool: "deploy", Arguments: []byte(`{}`), Deadline: time.Now().Add(time.Minute)}
	if req.Digest, err = protocol.Digest(req.RunID, req.CallKey, req.Tool, req.Arguments); err != nil {
		t.Fatal(err)
	}
	d, err := gate.Approve(ctx, req)
	if err == nil || d.Approved {
		t.Fatalf("a request the full audit log could not store: decision %+v, error %v; want an error and no approval", d, err)
	}
}
