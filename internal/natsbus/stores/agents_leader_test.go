package stores_test

import (
	"errors"
	"testing"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natsbus/bustest"
	"github.com/toolfleet/toolfleet/internal/natsbus/stores"
)

// TestAgentReadOnTheLeader: the read that confirms a get's "not found"
// on the bucket's leader finds a kept revision and the newest one, and
// says not found for a removed agent, another agent's revision and a name
// never stored.
func TestAgentReadOnTheLeader(t *testing.T) {
	f := bustest.NewFleet(t)
	if _, err := natsbus.Provision(bustest.Ctx(t), f.JS, f.Subjects, natsbus.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	store, err := stores.OpenAgents(bustest.Ctx(t), f.JS, f.Subjects)
	if err != nil {
		t.Fatal(err)
	}
	first, err := store.Put(bustest.Ctx(t), "support", []byte(`{"v":1}`))
	if err != nil {
		t.Fatal(err)
	}
	other, err := store.Put(bustest.Ctx(t), "ops", []byte(`{"ops":1}`))
	if err != nil {
		t.Fatal(err)
	}
	newest, err := store.Put(bustest.Ctx(t), "support", []byte(`{"v":2}`))
	if err != nil {
		t.Fatal(err)
	}
	if data, rev, err := store.OnLeader(bustest.Ctx(t), "support", first); err != nil || rev != first || string(data) != `{"v":1}` {
		t.Errorf("revision %d: %q %d %v", first, data, rev, err)
	}
	if data, rev, err := store.OnLeader(bustest.Ctx(t), "support", 0); err != nil || rev != newest || string(data) != `{"v":2}` {
		t.Errorf("newest: %q %d %v, want revision %d", data, rev, err, newest)
	}
	if _, _, err := store.OnLeader(bustest.Ctx(t), "support", other); !errors.Is(err, stores.ErrAgentNotFound) {
		t.Errorf("another agent's revision: %v, want ErrAgentNotFound", err)
	}
	if _, _, err := store.OnLeader(bustest.Ctx(t), "nobody", 0); !errors.Is(err, stores.ErrAgentNotFound) {
		t.Errorf("a name never stored: %v, want ErrAgentNotFound", err)
	}
	if err := store.Delete(bustest.Ctx(t), "support"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := store.OnLeader(bustest.Ctx(t), "support", 0); !errors.Is(err, stores.ErrAgentNotFound) {
		t.Errorf("a removed agent: %v, want ErrAgentNotFound", err)
	}
	if _, err := store.GetRevision(bustest.Ctx(t), "support", first); err != nil {
		t.Errorf("a removed agent's kept revision: %v", err)
	}
}
