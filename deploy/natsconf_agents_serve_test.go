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
	"github.com/toolfleet/toolfleet/internal/natstest"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/model/openai/openaitest"
	"github.com/toolfleet/toolfleet/pkg/model/scripted"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// TestConfTwoAgentsOneCoordinator: two agents with disjoint tool scopes and
// different providers (the scripted model for "support", a strict fake of
// the OpenAI API for "ops") served by one coordinator, on the shipped
// configuration with its client account narrowed as its comment shows: the
// client "client" may submit to "support" only, and a copy of the account,
// "client2", to "ops" only. The server refuses client's submission to
// "ops"; support's model calls ops's tool (calculator) and gets
// unknown_tool, and nothing is published on fleet.call.calculator; ops's
// run, from client2, calls calculator and gets 42.
func TestConfTwoAgentsOneCoordinator(t *testing.T) {
	s := startFromEditedConf(t, func(conf string) string {
		conf = withClient(t, "client2")(conf)
		narrowed := strings.NewReplacer(`"fleet.run.submit.client.>"`, `"fleet.run.submit.client.support.>"`,
			`"fleet.run.submit.client2.>"`, `"fleet.run.submit.client2.ops.>"`).Replace(conf)
		if strings.Count(narrowed, `"fleet.run.submit.client.support.>"`) != 2 || strings.Count(narrowed, `"fleet.run.submit.client2.ops.>"`) != 2 {
			t.Fatal("the shipped client account no longer grants and imports fleet.run.submit.client.>")
		}
		return narrowed
	})
	provision(t, s)
	ctx := t.Context()
	subjects := protocol.Subjects{}

	// The operator defines both agents.
	op := connectAs(t, s, "operator")
	store, err := natsbus.OpenAgents(ctx, op.js, subjects)
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
		`{"name":"support","instructions":"Answer with echo only.","tools":["echo"],
		  "model":{"provider":"scripted","script":{"turns":[
		    {"tool_calls":[{"id":"c1","name":"calculator","arguments":{"expression":"6 * 7"}},{"id":"c2","name":"echo","arguments":{"text":"hi"}}]},
		    {"content":"support done"}]}}}`,
		`{"name":"ops","instructions":"Compute.","tools":["calculator"],
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

	submit := func(js jetstream.JetStream, client, agentName, id string) error {
		subject, _ := subjects.RunSubmission(client, agentName, id)
		msg := nats.NewMsg(subject)
		msg.Data = []byte(`{"prompt":"go"}`)
		msg.Header.Set(protocol.HeaderMsgID, protocol.SubmissionMsgID(client, id))
		_, err := js.PublishMsg(ctx, msg)
		return err
	}
	// The server itself refuses the client on the agent it was not granted.
	if !refusedPub(t, cli, "fleet.run.submit.client.ops.x1") {
		t.Fatal("client's submission to ops was not refused by the server")
	}
	if err := submit(cli.js, "client", "support", "s1"); err != nil {
		t.Fatalf("client submitting to support: %v", err)
	}
	if err := submit(js2, "client2", "ops", "o1"); err != nil {
		t.Fatalf("client2 submitting to ops: %v", err)
	}

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
	if got := opsAPI.Requests(); len(got) < 2 || !bytes.Contains(got[1].Body, []byte(`42`)) {
		t.Fatalf("ops's model did not see the calculator's 42: %d requests", len(got))
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
