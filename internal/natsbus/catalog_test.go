package natsbus_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natstest"
	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

func specNames(specs []protocol.ToolSpec) string {
	var names []string
	for _, s := range specs {
		names = append(names, s.Name)
	}
	return strings.Join(names, ",")
}

func TestCatalogListsPublishedSpecsAndFollowsUpdates(t *testing.T) {
	f := newFleet(t)
	h, err := harness.New(harness.Config{}, harness.Echo(), harness.Calculator())
	if err != nil {
		t.Fatal(err)
	}
	if err := natsbus.PublishSpecs(ctx(t), f.js, f.subjects, h.Specs(), zerolog.Nop()); err != nil {
		t.Fatalf("PublishSpecs: %v", err)
	}
	cat, err := natsbus.NewCatalog(ctx(t), f.js, f.subjects, f.log.Logger())
	if err != nil {
		t.Fatalf("NewCatalog: %v", err)
	}
	defer cat.Close()
	specs, err := cat.Tools(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if got := specNames(specs); got != "calculator,echo" {
		t.Fatalf("Tools = %s, want calculator,echo (loaded before NewCatalog returns)", got)
	}
	if specs[1].SchemaDigest != h.Specs()[1].SchemaDigest || !specs[1].Idempotent {
		t.Fatalf("echo spec = %+v, want the harness's", specs[1])
	}

	// A worker with another tool comes along.
	more, _ := harness.New(harness.Config{}, harness.Tool{Name: "wc", Parameters: emptyObject,
		Run: func(_ context.Context, _ json.RawMessage) (string, error) { return "", nil }})
	if err := natsbus.PublishSpecs(ctx(t), f.js, f.subjects, more.Specs(), zerolog.Nop()); err != nil {
		t.Fatal(err)
	}
	waitTools(t, cat, "calculator,echo,wc")

	// A malformed entry is skipped and logged without its content; a
	// deleted entry disappears.
	kv, _ := f.js.KeyValue(ctx(t), f.subjects.CatalogBucket())
	if _, err := kv.Put(ctx(t), "bogus", []byte(`{"v":1,"name":"bogus","canary":"SECRET-CANARY"}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx(t), "liar", mustSpecJSON(t, more.Specs()[0])); err != nil { // name says wc
		t.Fatal(err)
	}
	if err := kv.Delete(ctx(t), "calculator"); err != nil {
		t.Fatal(err)
	}
	waitTools(t, cat, "echo,wc")
	natstest.WaitFor(t, 5*time.Second, func() error {
		if !f.log.Contains(`"key":"bogus"`) || !f.log.Contains(`"key":"liar"`) {
			return fmt.Errorf("malformed entries not logged: %s", f.log.String())
		}
		return nil
	})
	if f.log.Contains("SECRET-CANARY") {
		t.Fatal("a malformed entry's content reached the logs")
	}
	cat.Close()
	cat.Close() // idempotent
}

func TestPublishSpecsWarnsAboutConflictingSchemas(t *testing.T) {
	f := newFleet(t)
	v1 := harness.Tool{Name: "lookup", Parameters: json.RawMessage(`{"type":"object","properties":{"q":{"type":"string"}}}`),
		Run: func(_ context.Context, _ json.RawMessage) (string, error) { return "", nil }}
	v2 := v1
	v2.Parameters = json.RawMessage(`{"type":"object","properties":{"query":{"type":"string"}}}`)
	h1, _ := harness.New(harness.Config{}, v1)
	h2, _ := harness.New(harness.Config{}, v2)
	log := natstest.NewLogBuffer(t)
	if err := natsbus.PublishSpecs(ctx(t), f.js, f.subjects, h1.Specs(), log.Logger()); err != nil {
		t.Fatal(err)
	}
	if log.Contains("differs") {
		t.Fatal("warned on the first publication")
	}
	if err := natsbus.PublishSpecs(ctx(t), f.js, f.subjects, h2.Specs(), log.Logger()); err != nil {
		t.Fatal(err)
	}
	d1, d2 := h1.Specs()[0].SchemaDigest, h2.Specs()[0].SchemaDigest
	for _, want := range []string{`"tool":"lookup"`, d1, d2, `"level":"warn"`} {
		if !log.Contains(want) {
			t.Fatalf("conflict warning lacks %s: %s", want, log.String())
		}
	}
	cat, err := natsbus.NewCatalog(ctx(t), f.js, f.subjects, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()
	specs, _ := cat.Tools(ctx(t))
	if len(specs) != 1 || specs[0].SchemaDigest != d2 {
		t.Fatalf("catalog = %+v, want the newest spec", specs)
	}
}

func TestPublishSpecsRefusesAWrongDigest(t *testing.T) {
	f := newFleet(t)
	h, _ := harness.New(harness.Config{}, harness.Echo())
	spec := h.Specs()[0]
	spec.SchemaDigest = strings.Repeat("0", 64)
	if err := natsbus.PublishSpecs(ctx(t), f.js, f.subjects, []protocol.ToolSpec{spec}, zerolog.Nop()); err == nil {
		t.Fatal("PublishSpecs accepted a spec whose digest does not match its schema")
	}
}

func waitTools(t *testing.T, cat *natsbus.Catalog, want string) {
	t.Helper()
	natstest.WaitFor(t, 5*time.Second, func() error {
		specs, err := cat.Tools(ctx(t))
		if err != nil {
			return err
		}
		if got := specNames(specs); got != want {
			return fmt.Errorf("Tools = %s, want %s", got, want)
		}
		return nil
	})
}

func mustSpecJSON(t *testing.T, s protocol.ToolSpec) []byte {
	data, err := protocol.Encode(&s)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
