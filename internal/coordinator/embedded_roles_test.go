package coordinator_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/coordinator"
	"github.com/toolfleet/toolfleet/internal/discovery"
	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natstest"
	"github.com/toolfleet/toolfleet/pkg/model/scripted"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// A listening embedded server has the roles of deploy/nats-server.conf: a
// remote worker started with worker.env (the worker role) serves calls,
// and answers the coordinator's discovery on the coordinator's inbox (the
// only reply subjects the role may publish on). That no file it writes
// can approve is e2e.TestEmbeddedServeToolCannotApprove.
func TestListeningEmbeddedServerServesRemoteWorkers(t *testing.T) {
	t.Setenv("NATS_URL", "")
	t.Setenv("TOOLFLEET_OPERATOR_PASSWORD", "")
	model, err := scripted.Parse([]byte(`{"turns": [
	  {"tool_calls": [{"id": "a", "name": "calculator", "arguments": {"expression": "6 * 7"}}]},
	  {"content": "a={{result \"a\"}}"}
	]}`))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	c, err := coordinator.Open(t.Context(), coordinator.Config{
		Model: model, StoreDir: dir, Listen: "127.0.0.1:0", Builtins: []string{"echo"},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	client := readEnv(t, c.CredentialsFile())
	worker := readEnv(t, filepath.Join(filepath.Dir(c.CredentialsFile()), "worker.env"))
	if client["NATS_USER"] != "client" || worker["NATS_USER"] != "worker" || client["NATS_URL"] != c.ClientURL() {
		t.Fatalf("credentials files: client %v, worker %v", client["NATS_USER"], worker["NATS_USER"])
	}

	// Neither file holds a credential that may decide an approval.
	for _, env := range []map[string]string{client, worker} {
		nc, err := nats.Connect(env["NATS_URL"], nats.UserInfo(env["NATS_USER"], env["NATS_PASSWORD"]),
			nats.CustomInboxPrefix(env["NATS_INBOX_PREFIX"]))
		if err != nil {
			t.Fatal(err)
		}
		njs, _ := jetstream.New(nc)
		pctx, pcancel := context.WithTimeout(t.Context(), 5*time.Second)
		_, err = njs.Publish(pctx, "fleet.approval.decision.run1.key1", []byte(`{"approved":true}`))
		pcancel()
		nc.Close()
		if err == nil {
			t.Fatalf("user %s (a credentials file) published an approval decision", env["NATS_USER"])
		}
	}

	wnc, err := natsbus.Connect(t.Context(), natsbus.ConnConfig{URL: worker["NATS_URL"], User: worker["NATS_USER"],
		Password: worker["NATS_PASSWORD"], InboxPrefix: worker["NATS_INBOX_PREFIX"], Getenv: func(string) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	defer wnc.Close()
	w := newWorker(t, wnc, "remote-w", "", "calculator")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("remote worker: %v", err)
		}
	})
	js, err := jetstream.New(c.Conn())
	if err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 60*time.Second, func() error {
		select {
		case err := <-done:
			done <- err
			t.Fatalf("the remote worker stopped: %v", err)
		default:
		}
		kv, err := js.KeyValue(t.Context(), protocol.Subjects{}.CatalogBucket())
		if err != nil {
			return err
		}
		if _, err = kv.Get(t.Context(), "calculator"); err != nil {
			return err
		}
		// and the coordinator's catalog, which the run sees, has it
		specs, err := c.Fleet().Catalog.Tools(t.Context())
		if err != nil {
			return err
		}
		if !slices.ContainsFunc(specs, func(s protocol.ToolSpec) bool { return s.Name == "calculator" }) {
			return fmt.Errorf("the coordinator's catalog lacks calculator")
		}
		return nil
	})
	res, err := c.Run(t.Context(), "compute")
	if err != nil {
		t.Fatal(err)
	}
	if res.Answer != "a=42" {
		t.Fatalf("answer %q, want a=42 from the remote worker", res.Answer)
	}
	natstest.WaitFor(t, 60*time.Second, func() error {
		ws, err := discovery.Discover(t.Context(), c.Conn(), protocol.Subjects{}, discovery.DiscoverConfig{Wait: 5 * time.Second, Quiet: 2 * time.Second})
		if err != nil {
			return err
		}
		if !slices.ContainsFunc(ws, func(w discovery.DiscoveredWorker) bool { return w.Name == "remote-w" }) {
			return fmt.Errorf("discovery found %d workers, not remote-w", len(ws))
		}
		return nil
	})
}

func readEnv(t *testing.T, path string) map[string]string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			env[k] = v
		}
	}
	return env
}
