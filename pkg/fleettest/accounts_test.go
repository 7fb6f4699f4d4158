package fleettest

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/embedded"
	"github.com/toolfleet/toolfleet/pkg/client"
	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/model/scripted"
	"github.com/toolfleet/toolfleet/pkg/protocol"
	"github.com/toolfleet/toolfleet/pkg/runner"
	"github.com/toolfleet/toolfleet/pkg/tool"
)

type sumIn struct {
	A int `json:"a"`
	B int `json:"b"`
}

var sum = tool.Must(tool.New(tool.Config{Name: "sum", Idempotent: true},
	func(_ context.Context, in sumIn) (int, error) { return in.A + in.B, nil }))

// TestEachConnectionIsItsRole: the fleet's server runs the accounts of
// embedded.FleetAccounts with every password drawn, every role included
// (those deploy's TestEmbeddedRolesMatchConf holds to
// deploy/nats-server.conf), and every connection the fleet hands out is the
// user that does its job, in that user's account, as the server reports
// it: the coordinator, the workers and the operator in FLEET, the client in
// an account of its own.
func TestEachConnectionIsItsRole(t *testing.T) {
	fleet := Start(t, Config{Tools: []harness.Tool{sum}, Prefix: "team"})
	subjects, _ := protocol.NewSubjects("team")
	withoutPasswords := func(accounts []embedded.Account) []embedded.Account {
		for _, a := range accounts {
			for i := range a.Users {
				a.Users[i].Password = ""
			}
		}
		return accounts
	}
	got := withoutPasswords(fleet.server.Config().Accounts)
	if want := withoutPasswords(embedded.FleetAccounts(subjects, embedded.DrawPasswords)); !reflect.DeepEqual(got, want) {
		t.Errorf("the fleet's accounts:\n%+v\nwant embedded.FleetAccounts with every password drawn:\n%+v", got, want)
	}
	fleet.ConnectWorker()
	fleet.ConnectClient()
	fleet.ConnectOperator()
	z, err := fleet.server.NATSServer().Connz(&server.ConnzOptions{Username: true, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		embedded.RoleCoordinator: embedded.FleetAccount,
		embedded.RoleWorker:      embedded.FleetAccount,
		embedded.RoleOperator:    embedded.FleetAccount,
		embedded.RoleClient:      embedded.RoleClient,
	}
	seen := map[string]int{}
	for _, c := range z.Conns {
		role := c.Name[len("fleettest-"):]
		if c.AuthorizedUser != role || c.Account != want[role] {
			t.Errorf("connection %s: user %q in account %q, want user %s in account %s", c.Name, c.AuthorizedUser, c.Account, role, want[role])
		}
		seen[role]++
	}
	// ConnectWorker and the fleet's own worker are two workers.
	if seen[embedded.RoleCoordinator] != 1 || seen[embedded.RoleWorker] != 2 || seen[embedded.RoleClient] != 1 || seen[embedded.RoleOperator] != 1 {
		t.Errorf("connections by user: %v, want one coordinator, two workers, one client, one operator", seen)
	}
}

// TestClientsReflectedAcksStoreNothing is the reflected-acknowledgement
// attack of issue 34 on a test fleet, with the client's connection only:
// the client stores its own submission, then publishes it again, the same
// Nats-Msg-Id, with the reply subject an approval decision
// (fleet.approval.decision.x.y). The server acknowledges every copy there,
// but the acknowledgement travels back into the client's own account:
// FLEET_APPROVALS stores nothing on the decision subject and holds no more
// than before.
func TestClientsReflectedAcksStoreNothing(t *testing.T) {
	fleet := Start(t, Config{})
	ctx := t.Context()
	js, err := jetstream.New(fleet.Conn())
	if err != nil {
		t.Fatal(err)
	}
	approvals, err := js.Stream(ctx, "FLEET_APPROVALS")
	if err != nil {
		t.Fatal(err)
	}
	before, err := approvals.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}

	cli := fleet.ConnectClient()
	cjs, err := jetstream.New(cli)
	if err != nil {
		t.Fatal(err)
	}
	subject, err := protocol.Subjects{}.RunSubmission(embedded.RoleClient, protocol.DefaultAgent, "attack")
	if err != nil {
		t.Fatal(err)
	}
	msg := nats.NewMsg(subject)
	msg.Data = []byte(`{"prompt":"hi"}`)
	msg.Header.Set(protocol.HeaderMsgID, protocol.SubmissionMsgID(embedded.RoleClient, "attack"))
	msg.Header.Set(protocol.HeaderAgent, protocol.DefaultAgent)
	stored, err := cjs.PublishMsg(ctx, msg)
	if err != nil || stored.Stream != "FLEET_RUNS" || stored.Duplicate {
		t.Fatalf("the client storing its own submission: %+v, %v", stored, err)
	}
	decision := "fleet.approval.decision.x.y"
	msg.Reply = decision
	for range 1000 {
		if err := cli.PublishMsg(msg); err != nil {
			t.Fatal(err)
		}
	}
	// Asked once more on its own inbox: once this is acknowledged, every
	// copy before it has been.
	msg.Reply = ""
	again, err := cjs.PublishMsg(ctx, msg)
	if err != nil || !again.Duplicate || again.Sequence != stored.Sequence {
		t.Fatalf("the client's submission again: %+v, %v; want a duplicate of seq %d", again, err, stored.Sequence)
	}
	if err := cli.LastError(); err != nil {
		t.Fatalf("the client's connection: %v", err)
	}

	if m, err := approvals.GetLastMsgForSubject(ctx, decision); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Errorf("FLEET_APPROVALS on %s: %v (%v), want nothing stored", decision, m, err)
	}
	after, err := approvals.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after.State.Msgs != before.State.Msgs || after.State.LastSeq != before.State.LastSeq {
		t.Errorf("FLEET_APPROVALS went from %d messages (last %d) to %d (last %d)",
			before.State.Msgs, before.State.LastSeq, after.State.Msgs, after.State.LastSeq)
	}
}

// TestRolesWorkEndToEnd: under the accounts, each role still does its
// job. A runner on Conn (the coordinator) has a call run by the fleet's
// worker; the operator, and not the coordinator, may store an approval
// decision; the client submits a run through its account's import and
// reads its result, which the coordinator stored, through its export.
func TestRolesWorkEndToEnd(t *testing.T) {
	fleet := Start(t, Config{Tools: []harness.Tool{sum}})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	model, err := scripted.Parse([]byte(`{"turns": [
		{"tool_calls": [{"id": "c1", "name": "sum", "arguments": {"a": 2, "b": 3}}]},
		{"content": "{{result \"c1\"}}"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	res, err := fleet.Runner(runner.Config{Model: model}).Run(ctx, "2 + 3?")
	if err != nil || res.Answer != "5" || res.TerminationReason != loop.TerminationNatural {
		t.Fatalf("run = %+v, %v; want the worker's answer 5", res, err)
	}

	decision := "fleet.approval.decision.r1.k1"
	ojs, err := jetstream.New(fleet.ConnectOperator())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ojs.Publish(ctx, decision, []byte(`{}`)); err != nil {
		t.Errorf("the operator storing a decision: %v", err)
	}
	cjs, err := jetstream.New(fleet.Connect())
	if err != nil {
		t.Fatal(err)
	}
	short, stop := context.WithTimeout(ctx, time.Second)
	defer stop()
	if _, err := cjs.Publish(short, decision, []byte(`{}`)); err == nil {
		t.Error("the coordinator stored an approval decision")
	}

	c, err := client.New(fleet.ConnectClient(), client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Name() != embedded.RoleClient {
		t.Fatalf("client name %q, want %s", c.Name(), embedded.RoleClient)
	}
	run, err := c.Submit(ctx, client.Request{Prompt: "hi", ID: "order-1"})
	if err != nil {
		t.Fatalf("the client submitting: %v", err)
	}
	runs, err := cjs.KeyValue(ctx, "fleet_runs")
	if err != nil {
		t.Fatal(err)
	}
	data, err := protocol.Encode(&protocol.RunResult{V: protocol.Version, RunID: run.ID, Submission: run.Submission,
		Agent: protocol.DefaultAgent, Answer: "answered", TerminationReason: "natural"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := runs.Put(ctx, run.Key, data); err != nil {
		t.Fatalf("the coordinator storing the client's result: %v", err)
	}
	got, err := c.Wait(ctx, run)
	if err != nil || got.Answer != "answered" || got.RunID != run.ID {
		t.Fatalf("the client's result = %+v, %v; want the one stored for run %s", got, err, run.ID)
	}
}
