package dispatch_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/internal/natsbus/admission"
	"github.com/toolfleet/toolfleet/internal/natsbus/bustest"
	"github.com/toolfleet/toolfleet/internal/natsbus/dispatch"
	"github.com/toolfleet/toolfleet/internal/testsync"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// TestInboxProgressIsCheckedBoundedAndApart: a run's progress reaches the
// sink its context carries, checked against its subject and run, at most
// at the run's rate, and never among the inbox's events; forged and
// malformed reports are dropped.
func TestInboxProgressIsCheckedBoundedAndApart(t *testing.T) {
	f := bustest.NewFleet(t)
	d := dispatch.NewDispatcher(f.NC, f.JS, f.Subjects, dispatch.DispatcherConfig{Logger: f.Log.Logger()})
	var mu sync.Mutex
	var got []protocol.Progress
	c := loop.WithProgress(bustest.Ctx(t), func(p protocol.Progress) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, p)
	})
	start := time.Now() // before Open: the run's rate counts from there
	all, err := f.NC.SubscribeSync("fleet.progress.run1.*")
	if err != nil {
		t.Fatal(err)
	}
	in, err := d.Open(c, "run1")
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	pub := func(subject, body string) {
		t.Helper()
		if err := f.NC.Publish(subject, []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	report := func(run, key string, seq int) string {
		return fmt.Sprintf(`{"v":1,"run_id":%q,"call_key":%q,"seq":%d,"message":"step %d"}`, run, key, seq, seq)
	}
	pub("fleet.progress.run1.k1", report("run1", "k2", 1)) // another call's on k1's subject
	pub("fleet.progress.run1.k1", report("run2", "k1", 1)) // another run's
	pub("fleet.progress.run1.k1", `{"v":1,"run_id":"run1","call_key":"k1","seq":1,"message":"`+string(make([]byte, 600))+`"}`)
	pub("fleet.progress.run1.k1", `not json`)
	const flood = 2000
	for i := 1; i <= flood; i++ {
		pub("fleet.progress.run1.k1", report("run1", "k1", i))
	}
	if err := f.NC.Flush(); err != nil {
		t.Fatal(err)
	}
	// Once a plain subscriber on the same connection has every report,
	// the inbox's subscription has been handed them too.
	for i := 0; i < flood+4; i++ {
		if _, err := all.NextMsg(10 * time.Second); err != nil {
			t.Fatalf("report %d: %v", i, err)
		}
	}
	testsync.WaitUntil(t, 10*time.Second, "the first report", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) > 0
	})
	elapsed := time.Since(start)
	mu.Lock()
	n := len(got)
	for _, p := range got {
		if p.RunID != "run1" || p.CallKey != "k1" || p.Seq == 0 {
			t.Errorf("report %+v", p)
		}
	}
	mu.Unlock()
	bound := admission.RunProgressRate + int(elapsed.Seconds()+1)*admission.RunProgressRate
	t.Logf("%d of %d reports passed on in %v (bound %d)", n, flood, elapsed, bound)
	if n > bound {
		t.Errorf("%d reports passed on, want at most %d", n, bound)
	}
	select {
	case ev := <-in.Events():
		t.Errorf("an inbox event: %+v", ev)
	default:
	}
	if logs := f.Log.String(); !strings.Contains(logs, "subject_mismatch") {
		t.Errorf("forged reports not refused as subject_mismatch:\n%s", logs)
	}
}
