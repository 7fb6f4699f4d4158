package natsbus_test

import (
	"errors"
	"testing"

	"github.com/toolfleet/toolfleet/internal/natsbus"
)

// TestAgentReadOnTheLeader: the read that confirms a get's "not found"
// on the bucket's leader finds a kept revision and the newest one, and
// says not found for a removed agent, another agent's revision and a name
// never stored.
func TestAgentReadOnTheLeader(t *testing.T) {
	f := newFleet(t)
	if _, err := natsbus.Provision(ctx(t), f.js, f.subjects, natsbus.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	store, err := natsbus.OpenAgents(ctx(t), f.js, f.subjects)
	if err != nil {
		t.Fatal(err)
	}
	first, err := store.Put(ctx(t), "support", []byte(`{"v":1}`))
	if err != nil {
		t.Fatal(err)
	}
	other, err := store.Put(ctx(t), "ops", []byte(`{"ops":1}`))
	if err != nil {
		t.Fatal(err)
	}
	newest, err := store.Put(ctx(t), "support", []byte(`{"v":2}`))
	if err != nil {
		t.Fatal(err)
	}
	if data, rev, err := store.OnLeader(ctx(t), "support", first); err != nil || rev != first || string(data) != `{"v":1}` {
		t.Errorf("revision %d: %q %d %v", first, data, rev, err)
	}
	if data, rev, err := store.OnLeader(ctx(t), "support", 0); err != nil || rev != newest || string(data) != `{"v":2}` {
		t.Errorf("newest: %q %d %v, want revision %d", data, rev, err, newest)
	}
	if _, _, err := store.OnLeader(ctx(t), "support", other); !errors.Is(err, natsbus.ErrAgentNotFound) {
		t.Errorf("another agent's revision: %v, want ErrAgentNotFound", err)
	}
	if _, _, err := store.OnLeader(ctx(t), "nobody", 0); !errors.Is(err, natsbus.ErrAgentNotFound) {
		t.Errorf("a name never stored: %v, want ErrAgentNotFound", err)
	}
	if err := store.Delete(ctx(t), "support"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := store.OnLeader(ctx(t), "support", 0); !errors.Is(err, natsbus.ErrAgentNotFound) {
		t.Errorf("a removed agent: %v, want ErrAgentNotFound", err)
	}
	if _, err := store.GetRevision(ctx(t), "support", first); err != nil {
		t.Errorf("a removed agent's kept revision: %v", err)
	}
}
