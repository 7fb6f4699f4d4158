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
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// TestConfRunsQueueSharePerClient: under the shipped configuration with a
// second client account (bob), each client's share of FLEET_RUNS
// provisioned at 20 (natsbus.StreamConfig.MaxQueuedRunsPerClient, the
// stream's max_msgs_per_subject on the subjects its transform stores
// submissions under) and the stream at three shares, client floods 100
// distinct submissions spread over 50 agent names it invents, each named in
// its subject and in its Fleet-Agent header as the client library sends
// them: the server stores 20 and refuses the rest for client's share, not
// for a full stream, whatever agent each names. Bob's submission is stored
// beside the flood and served. Then each of the flood's stored runs is
// served: refused for its agent, which the fleet does not hold.
func TestConfRunsQueueSharePerClient(t *testing.T) {
	const share, flood, agents = 20, 100, 50
	s := startFromEditedConf(t, withClient(t, "bob"))
	subjects := protocol.Subjects{}
	admin := connectAs(t, s, "admin")
	streams := natsbus.StreamConfig{MaxQueuedRunsPerClient: share, MaxQueuedRuns: 3 * share}
	if _, err := natsbus.Provision(t.Context(), admin.js, subjects, streams); err != nil {
		t.Fatalf("admin provisioning the fleet: %v", err)
	}

	cli := connectAs(t, s, "client")
	var stored []string
	refused := map[string]int{}
	for i := range flood {
		id, agent := fmt.Sprintf("flood-%d", i), fmt.Sprintf("invented-%d", i%agents)
		subject, err := subjects.RunSubmission("client", agent, id)
		if err != nil {
			t.Fatal(err)
		}
		msg := nats.NewMsg(subject)
		msg.Data = []byte(`{"prompt":"flood"}`)
		msg.Header.Set(protocol.HeaderMsgID, protocol.SubmissionMsgID("client", id))
		msg.Header.Set(protocol.HeaderAgent, agent)
		_, err = cli.js.PublishMsg(t.Context(), msg)
		var api *jetstream.APIError
		switch {
		case err == nil:
			stored = append(stored, id)
		case errors.As(err, &api) && api.ErrorCode == errCodeStoreFailed:
			refused[api.Description]++
		default:
			t.Fatalf("client's submission %s: %v, want stored or refused", id, err)
		}
	}
	const perSubject = "maximum messages per subject exceeded"
	if len(stored) != share || refused[perSubject] != flood-share {
		t.Fatalf("client's flood of %d over %d agents: %d stored, refused %v; want %d stored, the rest refused %q",
			flood, agents, len(stored), refused, share, perSubject)
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
	if n := msgsIn(t, admin, subjects.RunsStream()); n != share+1 {
		t.Fatalf("FLEET_RUNS holds %d submissions, want client's %d and bob's", n, share)
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
	serve := coordinator.ServeConfig{Name: "runs", PollWait: 100 * time.Millisecond, MaxConcurrentRuns: 8, MaxQueuedRuns: streams.MaxQueuedRuns}
	go func() { served <- c.Serve(ctx, serve) }()
	t.Cleanup(func() { stop(); <-served; c.Close() })

	wctx, cancelWait := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancelWait()
	res, err := bc.Wait(wctx, bobRun)
	if err != nil || res.Answer != "done" || res.TerminationReason != "natural" {
		t.Fatalf("bob's run: %+v, %v; want finished naturally", res, err)
	}
	cc, err := tfclient.New(cli.nc, tfclient.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range stored {
		run, err := cc.RunOf("", id)
		if err != nil {
			t.Fatal(err)
		}
		_, err = cc.Wait(wctx, run)
		var refused *tfclient.RefusedError
		if !errors.As(err, &refused) || refused.Code != protocol.CodeInvalidField || refused.Field != "agent" {
			t.Fatalf("client's run %s for an invented agent: %v; want refused invalid_field agent", id, err)
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
// one, stored under fleet.run.queued.<client>. A submission
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

// TestConfRunsUpgradeFromAgentLayout: a runs stream of the layout before
// the agent moved to Fleet-Agent (stored under
// fleet.run.queued.<client>.<agent>, the coordinators' consumer filtered on
// it) holding two submissions as a client of that release sent them, with
// no Fleet-Agent header, is updated in place by provisioning: the server
// keeps their stored subjects, and a serving coordinator serves them on the
// agent their subject names. A new submission is stored under
// fleet.run.queued.<client> and served on its header's agent; one of the
// new layout without the header is refused, naming the header.
func TestConfRunsUpgradeFromAgentLayout(t *testing.T) {
	s := startFromConf(t)
	subjects := protocol.Subjects{}
	admin := connectAs(t, s, "admin")
	var former jetstream.StreamConfig
	for _, fs := range natsbus.FleetStreams(subjects, natsbus.StreamConfig{}) {
		if fs.Config.Name == subjects.RunsStream() {
			former = fs.Config
		}
	}
	former.SubjectTransform = &jetstream.SubjectTransformConfig{Source: subjects.RunSubmissions(),
		Destination: "fleet.run.queued.{{wildcard(1)}}.{{wildcard(2)}}"}
	if _, err := admin.js.CreateStream(t.Context(), former); err != nil {
		t.Fatalf("admin creating the runs stream of the former layout: %v", err)
	}
	if _, err := admin.js.CreateOrUpdateConsumer(t.Context(), subjects.RunsStream(), jetstream.ConsumerConfig{
		Durable: subjects.RunsConsumer(), Description: "toolfleet coordinators serving runs",
		FilterSubjects: []string{"fleet.run.queued.*.*", subjects.RunSubmissions()}, DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 10_000, MaxWaiting: 4096,
	}); err != nil {
		t.Fatalf("the former coordinators' consumer: %v", err)
	}
	cli := connectAs(t, s, "client")
	submit := func(agent, id string, header bool) {
		t.Helper()
		subject, err := subjects.RunSubmission("client", agent, id)
		if err != nil {
			t.Fatal(err)
		}
		msg := nats.NewMsg(subject)
		msg.Data = []byte(`{"prompt":"hi"}`)
		msg.Header.Set(protocol.HeaderMsgID, protocol.SubmissionMsgID("client", id))
		if header {
			msg.Header.Set(protocol.HeaderAgent, agent)
		}
		if _, err := cli.js.PublishMsg(t.Context(), msg); err != nil {
			t.Fatalf("client's submission %s: %v", id, err)
		}
	}
	submit(protocol.DefaultAgent, "old-1", false)
	submit("support", "old-2", false)
	st, err := admin.js.Stream(t.Context(), subjects.RunsStream())
	if err != nil {
		t.Fatal(err)
	}
	if raw, err := st.GetMsg(t.Context(), 2); err != nil || raw.Subject != "fleet.run.queued.client.support" {
		t.Fatalf("the former layout's submission: %+v, %v; want stored under fleet.run.queued.client.support", raw, err)
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
	cc, err := tfclient.New(cli.nc, tfclient.Config{})
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	fresh, err := cc.Submit(sctx, tfclient.Request{Prompt: "hi", ID: "new-1"})
	if err != nil {
		t.Fatal(err)
	}
	submit(protocol.DefaultAgent, "headerless-1", false)
	for seq, want := range map[uint64]string{1: "fleet.run.queued.client.default", 2: "fleet.run.queued.client.support",
		3: "fleet.run.queued.client", 4: "fleet.run.queued.client"} {
		if raw, err := st.GetMsg(t.Context(), seq); err != nil || raw.Subject != want {
			t.Fatalf("submission %d after the update: %+v, %v; want stored under %s", seq, raw, err, want)
		}
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
	run := func(id string) tfclient.Run {
		r, err := cc.RunOf("", id)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	for _, r := range []tfclient.Run{run("old-1"), fresh} {
		res, err := cc.Wait(wctx, r)
		if err != nil || res.Answer != "done" || res.TerminationReason != "natural" {
			t.Fatalf("run %s: %+v, %v; want finished naturally", r.Submission, res, err)
		}
	}
	// The fleet holds no agent support: the run is refused for the agent
	// its stored subject names.
	var refused *tfclient.RefusedError
	if _, err := cc.Wait(wctx, run("old-2")); !errors.As(err, &refused) || refused.Code != protocol.CodeInvalidField || refused.Field != "agent" {
		t.Fatalf("the former layout's run for support: %v; want refused invalid_field agent", err)
	}
	if _, err := cc.Wait(wctx, run("headerless-1")); !errors.As(err, &refused) || refused.Code != protocol.CodeInvalidField || refused.Field != protocol.HeaderAgent {
		t.Fatalf("a new submission without %s: %v; want refused invalid_field naming the header", protocol.HeaderAgent, err)
	}
	testsync.WaitUntil(t, time.Minute, "FLEET_RUNS is empty once every run was served", func() bool {
		return msgsIn(t, admin, subjects.RunsStream()) == 0
	})
}
