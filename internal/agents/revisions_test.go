package agents_test

import (
	"errors"
	"testing"

	"github.com/toolfleet/toolfleet/internal/agents"
)

// TestRegistryPassesOverInvalidRevisions: a valid definition, then three
// revisions that do not validate (a server's acknowledgement, garbage,
// another agent's definition): Resolve returns the valid one and tells
// Invalid of each of the three, newest first; Revisions marks them and the
// one runs start on. After a removal nothing older is used, and a valid put
// is used again.
func TestRegistryPassesOverInvalidRevisions(t *testing.T) {
	reg, js, _ := fleet(t)
	var told []uint64
	reg.Invalid = func(name string, rev uint64, err error) {
		if name != "support" || err == nil {
			t.Errorf("Invalid(%q, %d, %v)", name, rev, err)
		}
		told = append(told, rev)
	}
	_, valid, err := reg.Put(t.Context(), []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	kv, _ := js.KeyValue(t.Context(), "fleet_agents")
	var bad []uint64
	for _, v := range []string{`{"stream":"KV_fleet_agents","seq":1}`, `garbage`, `{"name":"other","model":{"provider":"openai","name":"m"}}`} {
		rev, err := kv.Put(t.Context(), "support", []byte(v))
		if err != nil {
			t.Fatal(err)
		}
		bad = append([]uint64{rev}, bad...)
	}
	d, rev, err := reg.Resolve(t.Context(), "support")
	if err != nil || rev != valid || d.Name != "support" {
		t.Fatalf("Resolve = %s, %d, %v; want support at revision %d", d.Name, rev, err, valid)
	}
	if len(told) != 3 || told[0] != bad[0] || told[1] != bad[1] || told[2] != bad[2] {
		t.Errorf("Invalid told %v, want %v", told, bad)
	}
	revs, err := reg.Revisions(t.Context(), "support")
	if err != nil || len(revs) != 4 {
		t.Fatalf("Revisions = %+v, %v", revs, err)
	}
	for i, r := range revs[:3] {
		if r.Revision != bad[i] || r.Err == nil || r.Used {
			t.Errorf("revision %+v, want %d invalid and unused", r, bad[i])
		}
	}
	if r := revs[3]; r.Revision != valid || r.Err != nil || !r.Used {
		t.Errorf("revision %+v, want %d valid and used", r, valid)
	}

	// Removed, then an invalid revision: nothing older runs.
	if err := kv.Delete(t.Context(), "support"); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(t.Context(), "support", []byte(`garbage`)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := reg.Resolve(t.Context(), "support"); !errors.Is(err, agents.ErrNotFound) {
		t.Fatalf("Resolve after a removal and an invalid revision: %v, want ErrNotFound", err)
	}
	_, again, err := reg.Put(t.Context(), []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if _, rev, err := reg.Resolve(t.Context(), "support"); err != nil || rev != again {
		t.Fatalf("Resolve after a valid put = %d, %v; want %d", rev, err, again)
	}
}
