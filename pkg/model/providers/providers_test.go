package providers_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/toolfleet/toolfleet/internal/coordinator"
	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natsbus/stores"
	"github.com/toolfleet/toolfleet/internal/natstest"
	"github.com/toolfleet/toolfleet/internal/testsync"
	"github.com/toolfleet/toolfleet/pkg/agent"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/loop/looptest"
	"github.com/toolfleet/toolfleet/pkg/model/openai/openaitest"
	"github.com/toolfleet/toolfleet/pkg/model/providers"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

func mustModel(t *testing.T, doc string) agent.Model {
	t.Helper()
	d, err := agent.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return d.Model
}

// TestModelsOnePerConfiguration: agents that share a configuration share
// a client; any difference makes another.
func TestModelsOnePerConfiguration(t *testing.T) {
	ms := &providers.Models{Getenv: func(string) string { return "k" }}
	a := mustModel(t, `{"name":"a","model":{"provider":"openai","name":"gpt-4.1-mini"}}`)
	b := mustModel(t, `{"name":"b","model":{"provider":"openai","name":"gpt-4.1-mini"}}`)
	c := mustModel(t, `{"name":"c","model":{"provider":"openai","name":"gpt-4.1-mini","temperature":0.5}}`)
	d := mustModel(t, `{"name":"d","model":{"provider":"anthropic","name":"claude-sonnet-4-5","api_key_env":"TEAM_B_API_KEY"}}`)
	ma, err := ms.Model(a)
	if err != nil {
		t.Fatal(err)
	}
	mb, _ := ms.Model(b)
	mc, _ := ms.Model(c)
	md, _ := ms.Model(d)
	if ma != mb || ma == mc || md == nil || ms.Len() != 3 {
		t.Fatalf("clients: a==b %v, a==c %v, %d made", ma == mb, ma == mc, ms.Len())
	}
	none := &providers.Models{Getenv: func(string) string { return "" }}
	if _, err := none.Model(d); err == nil || !strings.Contains(err.Error(), "TEAM_B_API_KEY") {
		t.Fatalf("an unset key: %v", err)
	}
}

// TestKeyNeverJournaledLoggedOrTraced: a journaled run on a real server
// whose model key is a canary; the fake API receives it, and neither the
// journal, the logs, the spans nor the result hold it.
func TestKeyNeverJournaledLoggedOrTraced(t *testing.T) {
	const canary = "sk-CANARY-7f3e9a1b2c4d"
	api := openaitest.NewServer(t, openaitest.Sequence(
		openaitest.Reply{ToolCalls: []loop.ToolCall{looptest.Call("c1", "echo", `{"text":"hi"}`)}},
		openaitest.Reply{Content: "done"},
	))
	api.APIKey = canary
	def, err := agent.Parse([]byte(`{"name":"canary","instructions":"Echo.","model":{"provider":"openai","name":"gpt-test",
		"base_url":"` + api.URL + `","api_key_env":"CANARY_API_KEY"},"tools":["echo"]}`))
	if err != nil {
		t.Fatal(err)
	}
	var logs testsync.Buffer
	log := zerolog.New(&logs).Level(zerolog.DebugLevel)
	ms := &providers.Models{Getenv: func(n string) string {
		switch n {
		case "CANARY_API_KEY":
			return canary
		case agent.EnvKeyHosts:
			return "CANARY_API_KEY=127.0.0.1" // the fake API's host
		}
		return ""
	}, Logger: log}
	model, err := ms.Model(def.Model)
	if err != nil {
		t.Fatal(err)
	}
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	srv := natstest.Start(t)
	c, err := coordinator.Open(t.Context(), coordinator.Config{
		Conn: natsbus.ConnConfig{URL: srv.ClientURL()}, Workers: 1, Builtins: []string{"echo"},
		Model: model, Agent: &def, Logger: log, Loop: loop.Config{TracerProvider: tp, TraceArgs: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if !c.Journaling() {
		t.Fatal("the run is not journaled")
	}
	res, err := c.RunJournaled(t.Context(), "say hi")
	if err != nil || res.Answer != "done" {
		t.Fatalf("%+v %v", res, err)
	}
	if len(api.Requests()) != 2 {
		t.Fatalf("the API got %d requests with the key", len(api.Requests()))
	}
	js, _ := jetstream.New(c.Conn())
	recs, err := stores.ReadJournal(t.Context(), js, protocol.Subjects{}, res.RunID)
	if err != nil || len(recs) == 0 {
		t.Fatalf("journal: %d records, %v", len(recs), err)
	}
	journal, _ := json.Marshal(recs)
	result, _ := json.Marshal(res)
	var spanText bytes.Buffer
	for _, s := range spans.Ended() {
		spanText.WriteString(s.Name())
		for _, a := range s.Attributes() {
			spanText.WriteString(string(a.Key) + "=" + a.Value.Emit() + "\n")
		}
		for _, e := range s.Events() {
			for _, a := range e.Attributes {
				spanText.WriteString(a.Value.Emit() + "\n")
			}
		}
	}
	if spans.Ended() == nil {
		t.Fatal("no spans recorded")
	}
	for what, text := range map[string]string{"journal": string(journal), "logs": logs.String(), "spans": spanText.String(), "result": string(result)} {
		if strings.Contains(text, canary) || strings.Contains(text, "CANARY-7f3e") {
			t.Errorf("the key is in the %s", what)
		}
	}
}
