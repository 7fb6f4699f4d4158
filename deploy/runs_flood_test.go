package deploy

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/internal/coordinator"
	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/testsync"
	tfclient "github.com/toolfleet/toolfleet/pkg/client"
	"github.com/toolfleet/toolfleet/pkg/model/scripted"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// TestConfRunsQueueIsSharedByClients measures what a flood of
// submissions from one client does to FLEET_RUNS and to a second client,
// under the shipped configuration with a second client account (bob) and
// the runs stream's bound lowered to 50 (ServeConfig.MaxQueuedRuns, the
// same in the provisioning and the serving coordinator): client
// stores 50 distinct submissions, the server refuses the rest (the stream
// is full, discard new), and refuses bob's too — the bound is the
// stream's, shared by every client (docs/security.md says why no
// per-client bound is built). Once a serving coordinator has taken
// client's runs, bob's same submission, sent again, is stored and served:
// the flood delays the second client, and takes nothing of it.
func TestConfRunsQueueIsSharedByClients(t *testing.T) {
	const bound = 50
	s := startFromEditedConf(t, withClient(t, "bob"))
	subjects := protocol.Subjects{}
	admin := connectAs(t, s, "admin")
	serve := coordinator.ServeConfig{Name: "runs", PollWait: 100 * time.Millisecond, MaxQueuedRuns: bound}
	if _, err := natsbus.Provision(t.Context(), admin.js, subjects, natsbus.StreamConfig{MaxQueuedRuns: bound}); err != nil {
		t.Fatalf("admin provisioning the fleet: %v", err)
	}

	cli := connectAs(t, s, "client")
	stored, refused := 0, 0
	for i := range bound + 10 {
		id := fmt.Sprintf("flood-%d", i)
		subject, err := subjects.RunSubmission("client", protocol.DefaultAgent, id)
		if err != nil {
			t.Fatal(err)
		}
		msg := nats.NewMsg(subject)
		msg.Data = []byte(`{"prompt":"hi"}`)
		msg.Header.Set(protocol.HeaderMsgID, protocol.SubmissionMsgID("client", id))
		_, err = cli.js.PublishMsg(t.Context(), msg)
		var api *jetstream.APIError
		switch {
		case err == nil:
			stored++
		case errors.As(err, &api) && api.ErrorCode == errCodeStoreFailed:
			refused++
		default:
			t.Fatalf("client's submission %s: %v", id, err)
		}
	}
	if stored != bound || refused != 10 {
		t.Fatalf("client's flood of %d: %d stored, %d refused; want %d stored, the rest refused", bound+10, stored, refused, bound)
	}

	bob := connectAs(t, s, "bob")
	bc, err := tfclient.New(bob.nc, tfclient.Config{})
	if err != nil {
		t.Fatal(err)
	}
	req := tfclient.Request{Prompt: "hi", ID: "order-1"}
	if _, err := bc.Submit(t.Context(), req); err == nil {
		t.Fatal("bob's submission was stored in the full runs stream")
	}

	model, err := scripted.Parse([]byte(`{"turns": [{"content": "done"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	c, err := coordinator.Open(t.Context(), coordinator.Config{
		Conn:  natsbus.ConnConfig{URL: s.ClientURL(), User: "coordinator", Password: passwords["coordinator"]},
		Model: model, Logger: zerolog.Nop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- c.Serve(ctx, serve) }()
	t.Cleanup(func() { stop(); <-served; c.Close() })
	testsync.WaitUntil(t, 2*time.Minute, "the coordinator takes client's runs", func() bool {
		return msgsIn(t, admin, subjects.RunsStream()) < bound
	})

	wctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	run, err := bc.Submit(wctx, req)
	if err != nil {
		t.Fatalf("bob's submission once the queue drained: %v", err)
	}
	res, err := bc.Wait(wctx, run)
	if err != nil || res.Answer != "done" || res.TerminationReason != "natural" {
		t.Fatalf("bob's run: %+v, %v; want finished naturally", res, err)
	}
}
