package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/agents"
	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natsbus/stores"
	"github.com/toolfleet/toolfleet/internal/natstest"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

const supportAgent = `{"name":"support","model":{"provider":"openai","name":"gpt-4.1-mini","api_key_env":"SUPPORT_API_KEY"},"tools":["kb_*"]}`

// TestAgentsCommand drives "coordinator agents" put, get, ls and rm, and
// a refused put, against a server with the fleet's streams.
func TestAgentsCommand(t *testing.T) {
	srv := natstest.Start(t)
	js, err := jetstream.New(natstest.Connect(t, srv))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := natsbus.Provision(t.Context(), js, protocol.Subjects{}, natsbus.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	store, err := stores.OpenAgents(t.Context(), js, protocol.Subjects{})
	if err != nil {
		t.Fatal(err)
	}
	conn := func(ctx context.Context) (*nats.Conn, error) { return nats.Connect(srv.ClientURL()) }
	env := func(n string) (string, bool) { return "k", n == "SUPPORT_API_KEY" }
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "good.json"), filepath.Join(dir, "bad.json")
	os.WriteFile(good, []byte(supportAgent), 0o600)
	os.WriteFile(bad, []byte(strings.Replace(supportAgent, `"tools"`, `"colour":"red","tools"`, 1)), 0o600)
	run := func(args ...string) (int, string) {
		var out, errb bytes.Buffer
		code := agentsGroup(env).run(t.Context(), args, &out, &errb, conn)
		return code, out.String() + errb.String()
	}
	if code, out := run("put", bad); code != 2 || !strings.Contains(out, "colour: unknown field") || !strings.Contains(out, "nothing stored") {
		t.Fatalf("put bad: %d %s", code, out)
	}
	if code, out := run("put", good); code != 0 || !strings.Contains(out, "revision 1") {
		t.Fatalf("put: %d %s", code, out)
	}
	if code, out := run("get", "support"); code != 0 || !strings.Contains(out, `"gpt-4.1-mini"`) {
		t.Fatalf("get: %d %s", code, out)
	}
	if code, out := run("ls"); code != 0 || !strings.Contains(out, "support") {
		t.Fatalf("ls: %d %s", code, out)
	}
	if code, out := run("rm", "support"); code != 0 {
		t.Fatalf("rm: %d %s", code, out)
	}
	if code, out := run("get", "support", "--revision", "1"); code != 0 || !strings.Contains(out, `"support"`) {
		t.Fatalf("get --revision after rm: %d %s", code, out)
	}
	if code, _ := run("get", "support"); code != 1 {
		t.Fatalf("get after rm: %d", code)
	}
	if names, _ := store.Names(t.Context()); len(names) != 0 {
		t.Fatalf("after rm: %v", names)
	}
}

// TestAgentsUsage: bad usage of "coordinator agents" exits 2 before any
// connection is made.
func TestAgentsUsage(t *testing.T) {
	conn := func(context.Context) (*nats.Conn, error) { return nil, errors.New("must not connect") }
	for _, args := range [][]string{
		{},
		{"explode"},
		{"put"},
		{"put", "/nonexistent/agent.json"},
		{"get"},
		{"get", "a", "b"},
		{"ls", "extra"},
		{"rm", "support", "--timeout", "0s"},
		{"show", "support", "--prefix", "a.b"},
	} {
		var out, errb bytes.Buffer
		if code := agentsGroup(nil).run(t.Context(), args, &out, &errb, conn); code != exitUsage {
			t.Errorf("agents %q: exit %d, want 2\n%s", args, code, errb.String())
		}
	}
}

// TestAgentsRevisionsMarkInvalid: "agents ls" names the revision runs
// start on and marks the newer ones that do not validate; "agents show"
// lists each, why it is invalid, and the one runs start on.
func TestAgentsRevisionsMarkInvalid(t *testing.T) {
	bad := errors.New("not a definition")
	revs := []agents.Revision{{Revision: 5, Err: bad}, {Revision: 4, Err: bad}, {Revision: 3, Err: bad}, {Revision: 2, Used: true}}
	if got, want := revisionSummary(revs), "revision 2 (newer revision 5, 4, 3 INVALID: runs start on 2)"; got != want {
		t.Errorf("ls: %q, want %q", got, want)
	}
	if got, want := revisionSummary(revs[3:]), "revision 2"; got != want {
		t.Errorf("ls of one valid revision: %q, want %q", got, want)
	}
	if got := revisionSummary(revs[:3]); !strings.Contains(got, "no valid revision") || !strings.Contains(got, "its runs fail") {
		t.Errorf("ls of invalid revisions only: %q", got)
	}
	var out bytes.Buffer
	showRevisions(&out, "support", revs)
	if strings.Count(out.String(), "INVALID: not a definition") != 3 || !strings.Contains(out.String(), fmt.Sprintf("revision %-8d valid (runs start on it); clients: every client", 2)) {
		t.Errorf("show:\n%s\nwant 3 invalid revisions and 2 marked as the one runs start on, serving every client", out.String())
	}
}

// TestAgentsShowClients: "agents ls" and "agents show" name the clients
// the revision serves, every client when its definition lists none.
func TestAgentsShowClients(t *testing.T) {
	revs := []agents.Revision{{Revision: 3, Clients: []string{"client", "web-shop"}, Used: true}, {Revision: 2}}
	if got, want := usedClients(revs), "; clients: client, web-shop"; got != want {
		t.Errorf("ls: %q, want %q", got, want)
	}
	var out bytes.Buffer
	showRevisions(&out, "support", revs)
	if !strings.Contains(out.String(), "valid (runs start on it); clients: client, web-shop") || !strings.Contains(out.String(), "valid; clients: every client") {
		t.Errorf("show:\n%s\nwant revision 3's clients and revision 2 for every client", out.String())
	}
	many := make([]string, 20)
	for i := range many {
		many[i] = fmt.Sprintf("c%d", i)
	}
	if got := clientsOf(many); !strings.HasSuffix(got, "c7, … (20 in all)") {
		t.Errorf("20 clients: %q, want the first 8 and the count", got)
	}
}
