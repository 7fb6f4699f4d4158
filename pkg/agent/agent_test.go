package agent_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/pkg/agent"
	"github.com/toolfleet/toolfleet/pkg/config"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/loop/looptest"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

func support(t testing.TB) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/support.json")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestParseValid reads every field of a full definition.
func TestParseValid(t *testing.T) {
	d, err := agent.Parse(support(t))
	if err != nil {
		t.Fatal(err)
	}
	if d.Name != "support" || d.Model.Name != "gpt-4.1-mini" || *d.Model.Temperature != 0.2 || d.Model.MaxTokens != 1024 ||
		time.Duration(d.Limits.ToolTimeout) != 20*time.Second || d.Budget.Prices["gpt-4.1-mini"].Output != 1.6 ||
		len(d.Clients) != 2 || d.Clients[1] != "web-shop" {
		t.Fatalf("%+v", d)
	}
	// The stored form parses back to the same definition.
	b, _ := d.Marshal()
	d2, err := agent.Parse(b)
	if err != nil {
		t.Fatalf("the marshalled form does not parse: %v\n%s", err, b)
	}
	b2, _ := d2.Marshal()
	if string(b) != string(b2) {
		t.Fatalf("round trip changed the definition:\n%s\n%s", b, b2)
	}
}

// edit returns the support definition with one JSON text replaced.
func edit(t *testing.T, old, new string) []byte {
	t.Helper()
	s := string(support(t))
	if !strings.Contains(s, old) {
		t.Fatalf("no %q in the fixture", old)
	}
	return []byte(strings.Replace(s, old, new, 1))
}

// TestParseRefusesHostileDefinitions: each bad definition is refused with
// a config.Error naming its field.
func TestParseRefusesHostileDefinitions(t *testing.T) {
	many := make([]string, 10000)
	for i := range many {
		many[i] = fmt.Sprintf("%q", fmt.Sprintf("t%d_*", i))
	}
	manyClients := make([]string, agent.MaxClients+1)
	for i := range manyClients {
		manyClients[i] = fmt.Sprintf(`"c%d"`, i)
	}
	cases := []struct {
		name  string
		doc   []byte
		field string
	}{
		{"unknown field", edit(t, `"name": "support",`, `"name": "support", "colour": "red",`), `colour`},
		{"unknown nested field", edit(t, `"max_tokens": 1024`, `"max_tokens": 1024, "top_k": 3`), `top_k`},
		{"bad name", edit(t, `"name": "support"`, `"name": "Support Agent"`), "name"},
		{"name with a dot", edit(t, `"name": "support"`, `"name": "a.b"`), "name"},
		{"huge instructions", edit(t, `"You are a support agent.`, `"`+strings.Repeat("x", agent.MaxInstructionsBytes)), "instructions"},
		{"10,000 tool patterns", edit(t, `["kb_*", "echo"]`, "["+strings.Join(many, ",")+"]"), "tools"},
		{"a bad pattern", edit(t, `"kb_*"`, `"kb.*"`), "tools[0]"},
		{"a star inside", edit(t, `"kb_*"`, `"k*b*"`), "tools[0]"},
		{"a repeated tool", edit(t, `"echo"]`, `"echo", "echo"]`), "tools[2]"},
		{"a pattern in require_approval", edit(t, `["echo"]`, `["kb_*"]`), "require_approval[0]"},
		{"a price of -1", edit(t, `"input": 0.4`, `"input": -1`), "budget.prices.gpt-4.1-mini.input"},
		{"a model name with a newline", edit(t, `"name": "gpt-4.1-mini"`, `"name": "gpt-4.1-mini\nX-Injected: 1"`), "model.name"},
		{"no model name", edit(t, `"name": "gpt-4.1-mini",`, ``), "model.name"},
		{"unknown provider", edit(t, `"provider": "openai"`, `"provider": "ollama"`), "model.provider"},
		{"temperature too high", edit(t, `0.2`, `9`), "model.temperature"},
		{"max_tokens negative", edit(t, `"max_tokens": 1024`, `"max_tokens": -5`), "model.max_tokens"},
		{"max_tokens a string", edit(t, `"max_tokens": 1024`, `"max_tokens": "many"`), "model.max_tokens"},
		{"the fleet's own credential", edit(t, `SUPPORT_OPENAI_API_KEY`, `TOOLFLEET_COORDINATOR_API_KEY`), "model.api_key_env"},
		{"a password variable", edit(t, `SUPPORT_OPENAI_API_KEY`, `NATS_PASSWORD`), "model.api_key_env"},
		{"a base URL with credentials", edit(t, `"temperature"`, `"base_url": "https://u:p@evil.example/v1", "temperature"`), "model.base_url"},
		{"a base URL of another scheme", edit(t, `"temperature"`, `"base_url": "file:///etc/passwd", "temperature"`), "model.base_url"},
		{"max_rounds negative", edit(t, `"max_rounds": 6`, `"max_rounds": -1`), "limits.max_rounds"},
		{"max_rounds huge", edit(t, `"max_rounds": 6`, `"max_rounds": 1000000000`), "limits.max_rounds"},
		{"a timeout that is not a duration", edit(t, `"20s"`, `"soon"`), "limits.tool_timeout"},
		{"a timeout as a number", edit(t, `"20s"`, `20`), "limits.tool_timeout"},
		{"a negative run duration", edit(t, `"10m"`, `"-10m"`), "limits.max_run_duration"},
		{"a negative cost", edit(t, `"cost_usd": 0.5`, `"cost_usd": -0.5`), "budget.cost_usd"},
		{"a cost without the model's price", edit(t, `"gpt-4.1-mini": {`, `"gpt-4o": {`), "budget.prices"},
		{"a cost budget without max_tokens", edit(t, `"max_tokens": 1024`, `"max_tokens": 0`), "model.max_tokens"},
		{"tool calls negative", edit(t, `"tool_calls": 40`, `"tool_calls": -1`), "budget.tool_calls"},
		{"a script for openai", edit(t, `"temperature"`, `"script": {"turns": []}, "temperature"`), "model.script"},
		{"an unknown class", edit(t, `"name": "support",`, `"name": "support", "class": "urgent",`), "class"},
		{"a client that is not a token", edit(t, `"web-shop"`, `"web.shop"`), "clients[1]"},
		{"a client wildcard", edit(t, `"web-shop"`, `"*"`), "clients[1]"},
		{"an empty client", edit(t, `"web-shop"`, `""`), "clients[1]"},
		{"a repeated client", edit(t, `"web-shop"`, `"client"`), "clients[1]"},
		{"clients not a list", edit(t, `["client", "web-shop"]`, `"client"`), "clients"},
		{"too many clients", edit(t, `["client", "web-shop"]`, "["+strings.Join(manyClients, ",")+"]"), "clients"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := agent.Parse(c.doc)
			var ce config.Error
			if !errors.As(err, &ce) {
				t.Fatalf("err %v, want a config.Error", err)
			}
			if ce.ConfigField() != c.field {
				t.Fatalf("field %q (%v), want %q", ce.ConfigField(), err, c.field)
			}
			if strings.ContainsAny(err.Error(), "\n\r") {
				t.Fatalf("the error carries a line break: %q", err)
			}
		})
	}
}

// TestServesClient: an agent with no clients serves every client; one
// with clients serves those only.
func TestServesClient(t *testing.T) {
	d, err := agent.Parse(support(t))
	if err != nil {
		t.Fatal(err)
	}
	for client, want := range map[string]bool{"client": true, "web-shop": true, "bob": false, "clien": false, "": false} {
		if got := d.ServesClient(client); got != want {
			t.Errorf("ServesClient(%q) = %v, want %v", client, got, want)
		}
	}
	d.Clients = nil
	if !d.ServesClient("bob") {
		t.Error("an agent without clients does not serve bob")
	}
}

// TestParseRefusesDocuments: what is not one JSON definition.
func TestParseRefusesDocuments(t *testing.T) {
	for _, doc := range []string{"", "null x", "{", `{"name":"a"} {"name":"b"}`, "[]", "\xff", strings.Repeat(" ", agent.MaxInputBytes+1), `{"name":"a","model":{"provider":"anthropic","name":"m"}}` + strings.Repeat(" ", agent.MaxDocumentBytes)} {
		if _, err := agent.Parse([]byte(doc)); err == nil {
			t.Fatalf("%.20q parsed", doc)
		}
	}
}

// TestParseClass: an agent's class is interactive (the default) or batch.
func TestParseClass(t *testing.T) {
	for class, want := range map[string]protocol.Class{"": protocol.ClassInteractive, "interactive": protocol.ClassInteractive, "batch": protocol.ClassBatch} {
		d, err := agent.Parse(edit(t, `"name": "support",`, fmt.Sprintf(`"name": "support", "class": %q,`, class)))
		if err != nil {
			t.Fatalf("class %q: %v", class, err)
		}
		if got, err := protocol.ParseClass(d.Class); err != nil || got != want {
			t.Fatalf("class %q: %q %v, want %q", class, got, err, want)
		}
	}
}

// TestCheckEnv: an unset key variable is refused, naming the field and
// the variable but never a value.
func TestCheckEnv(t *testing.T) {
	d, err := agent.Parse(support(t))
	if err != nil {
		t.Fatal(err)
	}
	err = d.CheckEnv(func(string) (string, bool) { return "", false })
	var ce config.Error
	if !errors.As(err, &ce) || ce.ConfigField() != "model.api_key_env" || !strings.Contains(err.Error(), "SUPPORT_OPENAI_API_KEY") {
		t.Fatalf("%v", err)
	}
	if err := d.CheckEnv(func(n string) (string, bool) { return "sk-secret", n == "SUPPORT_OPENAI_API_KEY" }); err != nil {
		t.Fatal(err)
	}
}

// TestScope: names, prefixes and * match; nothing else does.
func TestScope(t *testing.T) {
	s := agent.NewScope([]string{"kb_*", "echo"})
	for tool, want := range map[protocol.ToolName]bool{"kb_search": true, "kb_": true, "echo": true, "echo2": false, "deploy": false, "kb": false} {
		if s.Allows(tool) != want {
			t.Errorf("Allows(%s) = %v", tool, !want)
		}
	}
	if !agent.NewScope([]string{"*"}).Allows("deploy") || agent.NewScope(nil).Allows("echo") {
		t.Fatal("* or the empty scope")
	}
}

// TestScopedCatalogLaterTool: a tool that joins the catalog later is
// offered only when the scope matches it.
func TestScopedCatalogLaterTool(t *testing.T) {
	cat := looptest.NewCatalog(looptest.MustSpec("echo", `{"type":"object"}`))
	sc := agent.ScopedCatalog{Catalog: cat, Scope: agent.NewScope([]string{"echo", "kb_*"})}
	cat.Specs = append(cat.Specs, looptest.MustSpec("kb_search", `{"type":"object"}`), looptest.MustSpec("deploy", `{"type":"object"}`))
	specs, err := sc.Tools(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range specs {
		names = append(names, string(s.Name))
	}
	if strings.Join(names, ",") != "echo,kb_search" {
		t.Fatalf("offered %v", names)
	}
}

// TestLoopConfig: the agent's limits, approvals and budget reach the
// loop's configuration, which validates.
func TestLoopConfig(t *testing.T) {
	d, err := agent.Parse(support(t))
	if err != nil {
		t.Fatal(err)
	}
	c := d.LoopConfig(loop.Config{RequireApproval: []string{"deploy"}})
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.MaxRounds != 6 || c.MaxToolCallsPerRound != 4 || c.ToolTimeout != 20*time.Second || c.MaxRunDuration != 10*time.Minute ||
		strings.Join(c.RequireApproval, ",") != "deploy,echo" ||
		c.Budget != (loop.Budget{InputTokens: 200000, OutputTokens: 20000, CostUSD: 0.5, ToolCalls: 40, InputPrice: 0.4, OutputPrice: 1.6, MaxTokens: 1024}) {
		t.Fatalf("%+v", c)
	}
	msgs := d.Messages([]loop.Message{{Role: "user", Content: "hi"}})
	if len(msgs) != 2 || msgs[0].Role != "system" || msgs[0].Content != d.Instructions {
		t.Fatalf("%+v", msgs)
	}
}

// TestJournalRef: the agent entry round-trips, and one that is not valid
// is ignored.
func TestJournalRef(t *testing.T) {
	es := []loop.JournalEntry{
		{Kind: "request"},
		{Kind: agent.EntryAgent, Data: []byte(`{"name":"../x","revision":9}`)},
		agent.JournalEntry(agent.Ref{Name: "support", Revision: 7}),
	}
	r, ok := agent.FromJournal(es)
	if !ok || r != (agent.Ref{Name: "support", Revision: 7}) {
		t.Fatalf("%+v %v", r, ok)
	}
	if _, ok := agent.FromJournal(es[:2]); ok {
		t.Fatal("an invalid entry was read")
	}
}
