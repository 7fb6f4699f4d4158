package workerbus_test

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/internal/discovery"
	"github.com/toolfleet/toolfleet/internal/natsbus/bustest"
	"github.com/toolfleet/toolfleet/internal/natsbus/stores"
	"github.com/toolfleet/toolfleet/internal/natsbus/workerbus"
	"github.com/toolfleet/toolfleet/internal/natstest"
	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/harness/harnesstest"
)

// conflictRecorder is a SchemaObserver that records what it is told.
type conflictRecorder struct {
	mu        sync.Mutex
	conflicts []string
	counts    []int
}

func (r *conflictRecorder) SchemaConflict(tool string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.conflicts = append(r.conflicts, tool)
}

func (r *conflictRecorder) ConflictedTools(n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.counts = append(r.counts, n)
}

func (r *conflictRecorder) snapshot() ([]string, []int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.conflicts), slices.Clone(r.counts)
}

// twoWorkersDiscover is the monitor's discovery in these tests: it ends as
// soon as both workers answered, and otherwise waits a second of quiet
// after the last answer — a loaded machine's worker can answer more than
// the default 250ms after the other, and a worker missed by one check
// changes the conflict the monitor sees.
var twoWorkersDiscover = discovery.DiscoverConfig{Wait: 5 * time.Second, Quiet: time.Second, MaxWorkers: 2}

// TestSchemaMonitorReportsDisagreeingWorkers starts a worker serving echo,
// then a second one serving echo with another schema that publishes its
// spec: the monitor must notice by itself (catalog change), name the tool,
// both workers and both digests, count it once, and report the resolution
// once the catalog and the live workers agree again.
func TestSchemaMonitorReportsDisagreeingWorkers(t *testing.T) {
	t.Parallel() // its own server; it waits on the fleet, not the CPU
	f := bustest.NewFleet(t)
	hOld := harnesstest.New(t, harness.Config{}, harness.Echo())
	hNew := harnesstest.New(t, harness.Config{}, echoWithSchema(`{"type":"object","properties":{"message":{"type":"string"}},"required":["message"]}`))
	oldDigest, newDigest := hOld.Specs()[0].SchemaDigest, hNew.Specs()[0].SchemaDigest
	if err := stores.PublishSpecs(bustest.Ctx(t), f.JS, f.Subjects, hOld.Specs(), zerolog.Nop()); err != nil {
		t.Fatal(err)
	}
	f.StartWorker(t, hOld, workerbus.WorkerConfig{Name: "old"})

	rec := &conflictRecorder{}
	logs := natstest.NewLogBuffer(t)
	mon, err := discovery.NewSchemaMonitor(bustest.Ctx(t), f.NC, f.JS, f.Subjects, discovery.SchemaMonitorConfig{
		Interval: time.Hour, // only catalog changes and explicit checks
		Settle:   100 * time.Millisecond,
		Discover: twoWorkersDiscover,
		Observer: rec,
		Logger:   logs.Logger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer mon.Close()
	natstest.WaitFor(t, 10*time.Second, func() error {
		if _, counts := rec.snapshot(); len(counts) == 0 || counts[len(counts)-1] != 0 {
			return fmt.Errorf("ConflictedTools calls = %v, want a first check finding none", counts)
		}
		return nil
	})

	// A worker with another schema starts and publishes its spec.
	_, stopNew := f.StartWorker(t, hNew, workerbus.WorkerConfig{Name: "new"})
	discoverN(t, f, 2) // registered, as a real worker is within Settle
	if err := stores.PublishSpecs(bustest.Ctx(t), f.JS, f.Subjects, hNew.Specs(), zerolog.Nop()); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		if c, _ := rec.snapshot(); !slices.Equal(c, []string{"echo"}) {
			return fmt.Errorf("SchemaConflict calls = %v, want [echo]", c)
		}
		return nil
	})
	line := ""
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "disagree") {
			line = l
		}
	}
	for _, want := range []string{`"tool":"echo"`, `"catalog_digest":"` + newDigest, `"old=` + oldDigest, `"new=` + newDigest} {
		if !strings.Contains(line, want) {
			t.Fatalf("conflict warning %q lacks %s", line, want)
		}
	}
	got := mon.Conflicts()
	if len(got) != 1 || got[0].Tool != "echo" || len(got[0].Digests) != 2 {
		t.Fatalf("Conflicts = %+v, want echo with two digests", got)
	}

	// The same conflict found again is not reported again.
	if _, err := mon.Check(bustest.Ctx(t)); err != nil {
		t.Fatal(err)
	}
	if c, _ := rec.snapshot(); len(c) != 1 {
		t.Fatalf("SchemaConflict calls = %v after a second check, want one", c)
	}

	// The new worker leaves: the live worker now disagrees with the
	// catalog, a changed conflict. Then the old spec is published again.
	stopNew()
	natstest.WaitFor(t, 10*time.Second, func() error {
		got, err := mon.Check(bustest.Ctx(t))
		if err != nil {
			return err
		}
		if len(got) != 1 || len(got[0].Digests) != 1 || got[0].Digests[0].Digest != oldDigest {
			return fmt.Errorf("conflicts = %+v, want the catalog against the old worker", got)
		}
		return nil
	})
	if err := stores.PublishSpecs(bustest.Ctx(t), f.JS, f.Subjects, hOld.Specs(), zerolog.Nop()); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		got, err := mon.Check(bustest.Ctx(t))
		if err != nil || len(got) != 0 {
			return fmt.Errorf("conflicts = %+v (%v), want none", got, err)
		}
		return nil
	})
	if c, counts := rec.snapshot(); len(c) != 2 || counts[len(counts)-1] != 0 {
		t.Fatalf("SchemaConflict calls = %v, ConflictedTools = %v; want two reports and a final 0", c, counts)
	}
	if !logs.Contains("conflict resolved") {
		t.Fatal("no log line says the conflict was resolved")
	}
}
