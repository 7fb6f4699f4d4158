package deploy

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/internal/coordinator"
	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/testsync"
	tfclient "github.com/toolfleet/toolfleet/pkg/client"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// TestConfRunsQueueSharePerClient: under the shipped configuration with a
// second client account (bob) and each client's share of FLEET_RUNS
// provisioned at 20 (natsbus.StreamConfig.MaxQueuedRunsPerClient, the
// stream's max_msgs_per_subject on the subjects its transform stores
// submissions under), client floods 30 distinct submissions: the server
// stores 20 and refuses the rest for client's share, not for a full
// stream. Bob's submission is stored and served while client's 20 are
// still in the stream (their runs held by the model). Once released,
// every one of client's stored runs is served.
func TestConfRunsQueueSharePerClient(t *testing.T) {
	const share, over = 20, 10
	s := startFromEditedConf(t, withClient(t, "bob"))
	subjects := protocol.Subjects{}
	admin := connectAs(t, s, "admin")
	if _, err := natsbus.Provision(t.Context(), admin.js, subjects, natsbus.StreamConfig{MaxQueuedRunsPerClient: share}); err != nil {
		t.Fatalf("admin provisioning the fleet: %v", err)
	}

	cli := connectAs(t, s, "client")
	var stored []string
	refused := 0
	for i := range share + over {
		id := fmt.Sprintf("flood-%d", i)
		subject, err := subjects.RunSubmission("client", protocol.DefaultAgent, id)
		if err != nil {
			t.Fatal(err)
		}
		msg := nats.NewMsg(subject)
		msg.Data = []byte(`{"prompt":"flood"}`)
		msg.Header.Set(protocol.HeaderMsgID, protocol.SubmissionMsgID("client", id))
		_, err = cli.js.PublishMsg(t.Context(), msg)
		var api *jetstream.APIError
		switch {
		case err == nil:
			stored = append(stored, id)
		case errors.As(err, &api) && api.ErrorCode == errCodeStoreFailed && strings.Contains(api.Description, "per subject"):
			refused++
		default:
			t.Fatalf("client's submission %s: %v, want stored or refused for its share", id, err)
		}
	}
	if len(stored) != share || refused != over {
		t.Fatalf("client's flood of %d: %d stored, %d refused; want %d stored, the rest refused", share+over, len(stored), refused, share)
	}

	bob := connectAs(t, s, "bob")
	bc, err := tfclient.New(bob.nc, tfclient.Config{})
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	bobRun, err := bc.Submit(sctx, tfclient.Request{Prompt: "hi", ID: "order-1"})
	if err != nil {
		t.Fatalf("bob's submission beside client's flood: %v, want stored", err)
	}

	release := make(chan struct{})
	model := heldModel{held: "flood", release: release}
	c, err := coordinator.Open(t.Context(), coordinator.Config{
		Conn:  natsbus.ConnConfig{URL: s.ClientURL(), User: "coordinator", Password: passwords["coordinator"]},
		Model: model, Logger: zerolog.Nop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	serve := coordinator.ServeConfig{Name: "runs", PollWait: 100 * time.Millisecond, MaxConcurrentRuns: share + 4}
	go func() { served <- c.Serve(ctx, serve) }()
	t.Cleanup(func() { stop(); <-served; c.Close() })

	wctx, cancelWait := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancelWait()
	res, err := bc.Wait(wctx, bobRun)
	if err != nil || res.Answer != "done" || res.TerminationReason != "natural" {
		t.Fatalf("bob's run: %+v, %v; want finished naturally", res, err)
	}
	// Bob's submission is acknowledged once its result is stored; the
	// client's stay, their runs held.
	testsync.WaitUntil(t, time.Minute, "FLEET_RUNS holds only client's submissions", func() bool {
		return msgsIn(t, admin, subjects.RunsStream()) == share
	})

	close(release)
	cc, err := tfclient.New(cli.nc, tfclient.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range stored {
		run, err := cc.RunOf("", id)
		if err != nil {
			t.Fatal(err)
		}
		res, err := cc.Wait(wctx, run)
		if err != nil || res.Answer != "done" || res.TerminationReason != "natural" {
			t.Fatalf("client's run %s: %+v, %v; want finished naturally", id, res, err)
		}
	}
	testsync.WaitUntil(t, time.Minute, "FLEET_RUNS is empty once every run was served", func() bool {
		return msgsIn(t, admin, subjects.RunsStream()) == 0
	})
}

// heldModel answers "done"; a run whose prompt is held waits for release
// first.
type heldModel struct {
	held    string
	release <-chan struct{}
}

func (m heldModel) Complete(ctx context.Context, req loop.Request) (*loop.Response, error) {
	for _, msg := range req.Messages {
		if msg.Role == "user" && msg.Content == m.held {
			select {
			case <-m.release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
	}
	return &loop.Response{Message: loop.Message{Role: "assistant", Content: "done"}, FinishReason: "stop"}, nil
}

// TestConfRunsUpgradeKeepsQueuedSubmissions: a runs stream of the former
// layout (no subject transform, no per-client share) holding a client's
// submission is updated by provisioning, and a serving coordinator then
// serves both that submission, stored under its former subject, and a new
// one, stored under fleet.run.queued.<client>.<agent>. A submission
// without its Nats-Msg-Id, whose id the stored subject no longer carries,
// is terminated unrun and unanswered.
func TestConfRunsUpgradeKeepsQueuedSubmissions(t *testing.T) {
	s := startFromConf(t)
	subjects := protocol.Subjects{}
	admin := connectAs(t, s, "admin")
	var former jetstream.StreamConfig
	for _, fs := range natsbus.FleetStreams(subjects, natsbus.StreamConfig{}) {
		if fs.Config.Name == subjects.RunsStream() {
			former = fs.Config
		}
	}
	former.SubjectTransform, former.MaxMsgsPerSubject, former.DiscardNewPerSubject = nil, -1, false
	if _, err := admin.js.CreateStream(t.Context(), former); err != nil {
		t.Fatalf("admin creating the former runs stream: %v", err)
	}
	cli := connectAs(t, s, "client")
	cc, err := tfclient.New(cli.nc, tfclient.Config{})
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	old, err := cc.Submit(sctx, tfclient.Request{Prompt: "hi", ID: "old-1"})
	if err != nil {
		t.Fatal(err)
	}
	if m, err := admin.js.Stream(t.Context(), subjects.RunsStream()); err != nil {
		t.Fatal(err)
	} else if raw, err := m.GetMsg(t.Context(), 1); err != nil || raw.Subject != "fleet.run.submit.client.default.old-1" {
		t.Fatalf("the former stream's submission: %+v, %v; want stored under its submission subject", raw, err)
	}

	actions, err := natsbus.Provision(t.Context(), admin.js, subjects, natsbus.StreamConfig{})
	if err != nil {
		t.Fatalf("admin provisioning over the former runs stream: %v", err)
	}
	updated := false
	for _, a := range actions {
		updated = updated || (a.Stream == subjects.RunsStream() && a.Action == natsbus.ActionUpdated)
	}
	if !updated {
		t.Fatalf("provisioning did %+v, want %s updated", actions, subjects.RunsStream())
	}
	fresh, err := cc.Submit(sctx, tfclient.Request{Prompt: "hi", ID: "new-1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.js.Publish(t.Context(), "fleet.run.submit.client.default.bare-1", []byte(`{"prompt":"hi"}`)); err != nil {
		t.Fatalf("a submission without Nats-Msg-Id: %v, want stored", err)
	}

	c, err := coordinator.Open(t.Context(), coordinator.Config{
		Conn:  natsbus.ConnConfig{URL: s.ClientURL(), User: "coordinator", Password: passwords["coordinator"]},
		Model: heldModel{}, Logger: zerolog.Nop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		served <- c.Serve(ctx, coordinator.ServeConfig{Name: "runs", PollWait: 100 * time.Millisecond})
	}()
	t.Cleanup(func() { stop(); <-served; c.Close() })

	wctx, cancelWait := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancelWait()
	for _, run := range []tfclient.Run{old, fresh} {
		res, err := cc.Wait(wctx, run)
		if err != nil || res.Answer != "done" || res.TerminationReason != "natural" {
			t.Fatalf("run %s: %+v, %v; want finished naturally", run.Submission, res, err)
		}
	}
	testsync.WaitUntil(t, time.Minute, "FLEET_RUNS is empty: the submission without Nats-Msg-Id terminated", func() bool {
		return msgsIn(t, admin, subjects.RunsStream()) == 0
	})
	bare, err := cc.RunOf("", "bare-1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cc.Result(t.Context(), bare); !errors.Is(err, tfclient.ErrNotFound) {
		t.Fatalf("the result of the submission without Nats-Msg-Id: %v, want none", err)
	}
}
