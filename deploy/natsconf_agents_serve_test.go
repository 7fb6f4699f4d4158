package deploy

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/internal/agents"
	"github.com/toolfleet/toolfleet/internal/coordinator"
	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natsbus/stores"
	"github.com/toolfleet/toolfleet/internal/natstest"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/model/openai/openaitest"
	"github.com/toolfleet/toolfleet/pkg/model/scripted"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// TestConfTwoAgentsOneCoordinator: two agents with disjoint tool scopes and
// different providers (the scripted model for "support", a strict fake of
// the OpenAI API for "ops") served by one coordinator, on the shipped
// configuration with a copy of its client account, "client2"; support's
// definition lists the clients "client", ops's "client2". Support's model
// calls ops's tool (calculator) and gets unknown_tool, and nothing is
// published on fleet.call.calculator; ops's run, from client2, calls
// calculator and gets 42. Client's runs of ops — named in the subject and
// the Fleet-Agent header, or in the header alone behind a subject naming
// support — and client2's of support end refused (invalid_field agent)
// without a model call.
func TestConfTwoAgentsOneCoordinator(t *testing.T) {
	s := startFromEditedConf(t, withClient(t, "client2"))
	provision(t, s)
	ctx := t.Context()
	subjects := protocol.Subjects{}

	// The operator defines both agents.
	op := connectAs(t, s, "operator")
	store, err := stores.OpenAgents(ctx, op.js, subjects)
	if err != nil {
		t.Fatal(err)
	}
	reg := &agents.Registry{Store: store}
	opsAPI := openaitest.NewServer(t, func(n int, req *openaitest.Request) openaitest.Reply {
		if n == 0 {
			return openaitest.Reply{ToolCalls: []loop.ToolCall{{ID: "o1", Type: "function", Function: loop.FunctionCall{Name: "calculator", Arguments: `{"expression":"6 * 7"}`}}}}
		}
		return openaitest.Reply{Content: "ops done"}
	})
	t.Setenv("OPS_TEST_API_KEY", "tf-ops-key")
	// The fake API's host may receive that key (docs/agents.md, key hosts).
	t.Setenv("TOOLFLEET_MODEL_KEY_HOSTS", "OPS_TEST_API_KEY=127.0.0.1")
	for _, doc := range []string{
		`{"name":"support","instructions":"Answer with echo only.","tools":["echo"],"clients":["client"],
		  "model":{"provider":"scripted","script":{"turns":[
		    {"tool_calls":[{"id":"c1","name":"calculator","arguments":{"expression":"6 * 7"}},{"id":"c2","name":"echo","arguments":{"text":"hi"}}]},
		    {"content":"support done"}]}}}`,
		`{"name":"ops","instructions":"Compute.","tools":["calculator"],"clients":["client2"],
		  "model":{"provider":"openai","name":"test-model","base_url":"` + opsAPI.URL + `","api_key_env":"OPS_TEST_API_KEY"}}`,
	} {
		if _, _, err := reg.Put(ctx, []byte(doc)); err != nil {
			t.Fatalf("operator putting an agent: %v", err)
		}
	}

	// One coordinator, with in-process workers serving both tools.
	fallback, err := scripted.Parse([]byte(`{"turns": [{"content": "no agent"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	c, err := coordinator.Open(ctx, coordinator.Config{
		Conn:  natsbus.ConnConfig{URL: s.ClientURL(), User: "coordinator", Password: passwords["coordinator"]},
		Model: fallback, Builtins: []string{"calculator", "echo"}, Workers: 1, Logger: zerolog.Nop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	coord := connectAs(t, s, "coordinator")
	calls, err := coord.nc.SubscribeSync("fleet.call.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := coord.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() {
		served <- c.Serve(sctx, coordinator.ServeConfig{Name: "agents", PollWait: 100 * time.Millisecond})
	}()
	defer func() { stop(); <-served }()

	cli := connectAs(t, s, "client")
	t.Setenv("TOOLFLEET_CLIENT2_PASSWORD", "tf-client2-password")
	nc2, err := nats.Connect(s.ClientURL(), nats.UserInfo("client2", "tf-client2-password"), nats.CustomInboxPrefix("_INBOX_client2"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc2.Close()
	js2, err := jetstream.New(nc2)
	if err != nil {
		t.Fatal(err)
	}

	// header is the agent the submission's Fleet-Agent header names;
	// pkg/client names the subject's.
	submit := func(js jetstream.JetStream, client, agentName, header, id string) {
		t.Helper()
		subject, _ := subjects.RunSubmission(client, agentName, id)
		msg := nats.NewMsg(subject)
		msg.Data = []byte(`{"prompt":"go"}`)
		msg.Header.Set(protocol.HeaderMsgID, protocol.SubmissionMsgID(client, id))
		msg.Header.Set(protocol.HeaderAgent, header)
		if _, err := js.PublishMsg(ctx, msg); err != nil {
			t.Fatalf("%s submitting %s for %s: %v, want stored", client, id, header, err)
		}
	}
	submit(cli.js, "client", "support", "support", "s1")
	submit(js2, "client2", "ops", "ops", "o1")
	submit(cli.js, "client", "ops", "ops", "x1")
	submit(cli.js, "client", "support", "ops", "x2")
	submit(js2, "client2", "support", "support", "x3")

	admin := connectAs(t, s, "admin")
	kv, err := admin.js.KeyValue(ctx, subjects.RunsBucket())
	if err != nil {
		t.Fatal(err)
	}
	result := func(client, id string) protocol.RunResult {
		key := protocol.RunKey(client, protocol.SubmissionRunID(client, id))
		var rec protocol.RunResult
		natstest.WaitFor(t, 60*time.Second, func() error {
			e, err := kv.Get(ctx, key)
			if err != nil {
				return err
			}
			return json.Unmarshal(e.Value(), &rec)
		})
		return rec
	}
	outcomes := func(rec protocol.RunResult) map[string]string {
		var calls []struct {
			Name    string `json:"tool"`
			Outcome string `json:"outcome"`
		}
		if err := json.Unmarshal(rec.Calls, &calls); err != nil {
			t.Fatalf("run %s: calls %s: %v", rec.RunID, rec.Calls, err)
		}
		out := map[string]string{}
		for _, c := range calls {
			out[c.Name] = c.Outcome
		}
		return out
	}
	sup := result("client", "s1")
	if sup.Answer != "support done" || sup.Agent != "support" {
		t.Fatalf("support run: agent %q answer %q error %+v", sup.Agent, sup.Answer, sup.Error)
	}
	if o := outcomes(sup); o["calculator"] != string(protocol.OutcomeUnknownTool) || o["echo"] != string(protocol.OutcomeOK) {
		t.Fatalf("support run's outcomes %v: want calculator unknown_tool, echo ok", o)
	}
	ops := result("client2", "o1")
	if ops.Answer != "ops done" || outcomes(ops)["calculator"] != string(protocol.OutcomeOK) {
		t.Fatalf("ops run: answer %q outcomes %v error %+v", ops.Answer, outcomes(ops), ops.Error)
	}
	for _, r := range []struct{ client, id, agent string }{{"client", "x1", "ops"}, {"client", "x2", "ops"}, {"client2", "x3", "support"}} {
		rec := result(r.client, r.id)
		if rec.Error == nil || rec.Error.Code != protocol.CodeInvalidField || rec.Error.Field != "agent" || rec.Agent != r.agent || rec.TerminationReason != "" {
			t.Fatalf("%s's run %s of %s: agent %q error %+v termination %q; want refused invalid_field agent", r.client, r.id, r.agent, rec.Agent, rec.Error, rec.TerminationReason)
		}
	}
	if got := opsAPI.Requests(); len(got) != 2 || !bytes.Contains(got[1].Body, []byte(`42`)) {
		t.Fatalf("ops's model: %d requests, want ops's run's 2, the second with the calculator's 42", len(got))
	}
	// Only ops's calculator call and support's echo call were published.
	var published []string
	for {
		m, err := calls.NextMsg(200 * time.Millisecond)
		if err != nil {
			break
		}
		published = append(published, m.Subject)
	}
	if strings.Count(strings.Join(published, " "), "fleet.call.calculator") != 1 || !strings.Contains(strings.Join(published, " "), "fleet.call.echo") {
		t.Fatalf("published calls %v: want one on fleet.call.calculator (ops's) and one on fleet.call.echo (support's)", published)
	}
}

// startFromEditedConf starts nats-server with deploy/nats-server.conf as
// edit changes it, as startFromConf does with the file itself.
func startFromEditedConf(t *testing.T, edit func(string) string) *server.Server {
	t.Helper()
	for user, pw := range passwords {
		t.Setenv(passwordVar(user), pw)
	}
	t.Setenv("TOOLFLEET_CLIENT2_PASSWORD", "tf-client2-password")
	data, err := os.ReadFile("nats-server.conf")
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "nats-server.conf")
	if err := os.WriteFile(file, []byte(edit(string(data))), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(file)
	if err != nil {
		t.Fatalf("ProcessConfigFile: %v", err)
	}
	opts.Host, opts.Port, opts.StoreDir = "127.0.0.1", server.RANDOM_PORT, t.TempDir()
	opts.NoSigs, opts.NoLog = true, true
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("NewServer: %v", err)
	}
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return s
}
