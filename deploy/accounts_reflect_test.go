package deploy

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/internal/coordinator"
	"github.com/toolfleet/toolfleet/internal/natsbus"
	tfclient "github.com/toolfleet/toolfleet/pkg/client"
	"github.com/toolfleet/toolfleet/pkg/model/scripted"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// reflections is how often each attack re-publishes its one stored
// submission: every copy is a duplicate the server stores nothing for, yet
// acknowledges on the reply subject it carries.
const reflections = 2000

// bob is the second client account of withClient("bob"); its password
// is read by the conf as TOOLFLEET_BOB_PASSWORD.
func init() { passwords["bob"] = "tf-bob-5e6f7a" }

// withClient returns conf with one more client account, name, made as the
// conf says: its client block copied with name in place of "client".
func withClient(t *testing.T, name string) func(string) string {
	return func(conf string) string {
		start := strings.Index(conf, "\n  client {\n")
		end := strings.Index(conf[start+1:], "\n  }\n")
		if start < 0 || end < 0 {
			t.Fatal("nats-server.conf: no client account block")
		}
		block := conf[start : start+1+end+len("\n  }\n")]
		copied := strings.NewReplacer("_INBOX_client", "_INBOX_"+name,
			"TOOLFLEET_CLIENT_PASSWORD", passwordVar(name)).Replace(block)
		copied = regexp.MustCompile(`\bclient\b`).ReplaceAllString(copied, name)
		return conf[:start] + block + copied[1:] + conf[start+len(block):]
	}
}

// reflect performs the attack of issue 34 as the client c (user name):
// it submits one run (agent default, submission id), stored in FLEET_RUNS,
// then publishes the same message, the same Nats-Msg-Id, again and again
// with target as its reply subject: each copy is acknowledged by the
// server on target. It ends with one more copy asked on its own inbox and
// returns that acknowledgement's sequence: the stored submission's.
func reflect(t *testing.T, c client, name, submission, target string) uint64 {
	t.Helper()
	subject, err := protocol.Subjects{}.RunSubmission(name, protocol.DefaultAgent, submission)
	if err != nil {
		t.Fatal(err)
	}
	msg := nats.NewMsg(subject)
	msg.Data = []byte(`{"prompt":"hi"}`)
	msg.Header.Set(protocol.HeaderMsgID, protocol.SubmissionMsgID(name, submission))
	msg.Header.Set(protocol.HeaderAgent, protocol.DefaultAgent)
	msg.Reply = target
	for range reflections {
		if err := c.nc.PublishMsg(msg); err != nil {
			t.Fatalf("%s re-publishing its submission: %v", name, err)
		}
	}
	if violated(t, c, "Publish", subject) {
		t.Fatalf("%s: its own submission refused", name)
	}
	msg.Reply = ""
	ack, err := c.js.PublishMsg(t.Context(), msg)
	if err != nil {
		t.Fatalf("%s: its own submission, asked on its inbox: %v", name, err)
	}
	if !ack.Duplicate || ack.Stream != "FLEET_RUNS" {
		t.Fatalf("%s: acknowledgement %+v, want a duplicate in FLEET_RUNS", name, ack)
	}
	return ack.Sequence
}

// storedOn returns what stream holds on subject (read as admin), or "".
func storedOn(t *testing.T, admin client, stream, subject string) string {
	t.Helper()
	st, err := admin.js.Stream(t.Context(), stream)
	if err != nil {
		t.Fatalf("admin: stream %s: %v", stream, err)
	}
	m, err := st.GetLastMsgForSubject(t.Context(), subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return ""
	}
	if err != nil {
		t.Fatalf("admin: %s on %s: %v", stream, subject, err)
	}
	return fmt.Sprintf("seq %d: %.200s", m.Sequence, m.Data)
}

// TestHostileReflectedAcksOntoFleetSubjects is attacks 1 and 2 of issue
// 34, with the client credential only, against the shipped configuration:
// the client re-publishes its one stored submission with the reply subject
// an approval decision (1: the acknowledgements would fill FLEET_APPROVALS)
// and the operator's agent definition (2: each would be a new revision of
// $KV.fleet_agents.support). The acknowledgements travel back into the
// client's own account: nothing is stored on either subject, the audit log
// holds nothing more and the agent keeps its one revision.
func TestHostileReflectedAcksOntoFleetSubjects(t *testing.T) {
	t.Parallel()
	s := startFromConf(t)
	provision(t, s)
	ctx := t.Context()
	admin := connectAs(t, s, "admin")
	op := connectAs(t, s, "operator")
	agents, err := op.js.KeyValue(ctx, "fleet_agents")
	if err != nil {
		t.Fatal(err)
	}
	rev, err := agents.Put(ctx, "support", []byte(agentDoc))
	if err != nil {
		t.Fatalf("operator writing agent support: %v", err)
	}
	approvals, err := admin.js.Stream(ctx, "FLEET_APPROVALS")
	if err != nil {
		t.Fatal(err)
	}
	before, err := approvals.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}

	cli := connectAs(t, s, "client")
	decision := "fleet.approval.decision.r1.k1"
	reflect(t, cli, "client", "attack-1", decision)
	reflect(t, cli, "client", "attack-2", "$KV.fleet_agents.support")

	if got := storedOn(t, admin, "FLEET_APPROVALS", decision); got != "" {
		t.Errorf("attack 1: FLEET_APPROVALS stored on %s: %s", decision, got)
	}
	after, err := approvals.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after.State.Msgs != before.State.Msgs || after.State.LastSeq != before.State.LastSeq {
		t.Errorf("attack 1: FLEET_APPROVALS went from %d messages (last %d) to %d (last %d)",
			before.State.Msgs, before.State.LastSeq, after.State.Msgs, after.State.LastSeq)
	}
	if e, err := agents.Get(ctx, "support"); err != nil {
		t.Errorf("attack 2: agent support: %v", err)
	} else if e.Revision() != rev || string(e.Value()) != agentDoc {
		t.Errorf("attack 2: agent support is revision %d, %.200s; want the operator's revision %d", e.Revision(), e.Value(), rev)
	}
	if got := storedOn(t, admin, "KV_fleet_agents", "$KV.fleet_agents.support"); !strings.HasPrefix(got, fmt.Sprintf("seq %d:", rev)) {
		t.Errorf("attack 2: the newest revision of support is %s, want the operator's %d", got, rev)
	}
}

// TestHostileReflectedAcksOntoAnotherClientsRun is attacks 3 and 4 of
// issue 34, with a second client account (bob, added as the conf says),
// against a real serving coordinator: the client learns the run id of
// bob's submission "order-1234" and, before bob submits, points the
// acknowledgements of its own submission at bob's cancel subject (3) and
// at bob's result key (4). Nothing is stored on either; bob's run runs,
// is not cancelled, and its result is its own. The same attack after bob's
// run leaves his stored result as it was. Bob, for his part, knowing the
// first client's submission id and so its run id, can neither read,
// announce, cancel nor submit as the first client, and submitting that
// submission id gets him a run of his own.
func TestHostileReflectedAcksOntoAnotherClientsRun(t *testing.T) {
	s := startFromEditedConf(t, withClient(t, "bob"))
	provision(t, s)
	ctx := t.Context()
	serveRuns(t, s, `{"turns": [{"content": "done"}]}`)

	admin := connectAs(t, s, "admin")
	cli := connectAs(t, s, "client")
	bob := connectAs(t, s, "bob")
	run := protocol.SubmissionRunID("bob", "order-1234")
	cancel := "fleet.journal.cancel." + string(run)
	key := "$KV.fleet_runs." + protocol.RunKey("bob", run)

	attack := func(id string) {
		reflect(t, cli, "client", id+"-3", cancel)
		reflect(t, cli, "client", id+"-4", key)
	}
	attack("before")

	bc, err := tfclient.New(bob.nc, tfclient.Config{})
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithTimeout(ctx, time.Minute)
	defer stop()
	submitted, err := bc.Submit(wctx, tfclient.Request{Prompt: "hi", ID: "order-1234"})
	if err != nil || submitted.ID != run {
		t.Fatalf("bob submitting: %+v, %v; want run %s", submitted, err, run)
	}
	res, err := bc.Wait(wctx, submitted)
	if err != nil || res.RunID != run || res.Answer != "done" || res.TerminationReason != "natural" {
		t.Fatalf("bob's result = %+v, %v; want his run %s finished naturally with its answer", res, err, run)
	}
	attack("after")
	again, err := bc.Result(wctx, submitted)
	if err != nil || again.RunID != run || again.Answer != "done" {
		t.Errorf("bob's result after the attack = %+v, %v; want his own", again, err)
	}
	if got := storedOn(t, admin, "FLEET_CANCELS", cancel); got != "" {
		t.Errorf("attack 3: FLEET_CANCELS stored on %s: %s", cancel, got)
	}
	if got := storedOn(t, admin, "KV_fleet_runs", key); strings.Contains(got, `"stream"`) {
		t.Errorf("attack 4: bob's result key holds %s", got)
	}

	t.Run("bob reaches nothing of client's", func(t *testing.T) {
		cliRun := protocol.SubmissionRunID("client", "before-3")
		for _, subj := range []string{
			"$JS.API.DIRECT.GET.KV_fleet_runs.$KV.fleet_runs.client." + string(cliRun),
			"fleet.run.submit.client.default.x",
			"fleet.run.result.client." + string(cliRun),
			"fleet.journal.cancel." + string(cliRun),
			"$KV.fleet_runs.client." + string(cliRun),
			"$JS.API.CONSUMER.CREATE.KV_fleet_runs.x",
			"$JS.API.INFO",
		} {
			if !refusedPub(t, bob, subj) {
				t.Errorf("bob publish on %s not refused", subj)
			}
		}
		for _, subj := range []string{"fleet.run.result.client.>", "fleet.run.progress.client.>", "fleet.>", ">"} {
			if !refusedSub(t, bob, subj) {
				t.Errorf("bob subscribe on %s not refused", subj)
			}
		}
		// Knowing client's submission id, bob submits it as his own: the
		// run id is derived from (client, submission id), so he gets a run
		// of his own, and client's run and result are untouched.
		mine, err := bc.Submit(wctx, tfclient.Request{Prompt: "hi", ID: "before-3"})
		if err != nil || mine.ID == cliRun || mine.ID != protocol.SubmissionRunID("bob", "before-3") {
			t.Fatalf("bob submitting client's submission id: %+v, %v; want a run of his own", mine, err)
		}
		if res, err := bc.Wait(wctx, mine); err != nil || res.RunID != mine.ID {
			t.Errorf("bob's run of client's submission id: %+v, %v; want his own result", res, err)
		}
		clientResult := storedOn(t, admin, "KV_fleet_runs", "$KV.fleet_runs."+protocol.RunKey("client", cliRun))
		if !strings.Contains(clientResult, `"run_id":"`+string(cliRun)+`"`) {
			t.Errorf("client's result after bob used its submission id: %s; want client's run %s", clientResult, cliRun)
		}
	})
}

// serveRuns serves runs on s with a coordinator (user coordinator) whose
// model follows script, until the test ends.
func serveRuns(t *testing.T, s *server.Server, script string) {
	t.Helper()
	model, err := scripted.Parse([]byte(script))
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
	go func() {
		served <- c.Serve(ctx, coordinator.ServeConfig{Name: "accounts", PollWait: 100 * time.Millisecond})
	}()
	t.Cleanup(func() { stop(); <-served; c.Close() })
}
