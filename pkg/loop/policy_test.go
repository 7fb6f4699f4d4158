package loop_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/loop/looptest"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// handedOffAtApproval runs durableModel under RequireApproval echo and
// hands the run off while its first approval waits; it returns the journal.
func handedOffAtApproval(t *testing.T, run protocol.RunID) *looptest.Journal {
	t.Helper()
	var asked atomic.Int64
	j := looptest.NewJournal()
	handoff := make(chan struct{})
	gate := &looptest.Gate{Func: func(ctx context.Context, req protocol.ApprovalRequest) (loop.Decision, error) {
		close(handoff)
		<-ctx.Done()
		return loop.Decision{}, ctx.Err()
	}}
	d := looptest.New(handler)
	d.Durable = true
	if _, err := durableRunner(t, durableModel(&asked), d, gate).
		RunDurable(context.Background(), loop.Durable{Prompt: "go", RunID: run, Journal: j, Handoff: handoff}); !errors.Is(err, loop.ErrHandedOff) {
		t.Fatal(err)
	}
	d.Wait()
	return j
}

// TestDurablePolicyBelongsToTheRun: a run started under RequireApproval
// echo, resumed by a runner that requires no approval, still asks the gate
// for every echo call — the open request and the later rounds' — and
// dispatches none the gate denies; approved, each runs once.
func TestDurablePolicyBelongsToTheRun(t *testing.T) {
	for _, tc := range []struct {
		name    string
		gate    *looptest.Gate
		outcome protocol.Outcome
	}{
		{"denied", looptest.DenyAll("no"), protocol.OutcomeDenied},
		{"approved", looptest.AllowAll(), protocol.OutcomeOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := handedOffAtApproval(t, protocol.RunID("policy-"+tc.name))
			var asked atomic.Int64
			d := looptest.New(handler)
			d.Durable = true
			r, err := loop.New(loop.Config{}, durableModel(&asked), looptest.NewCatalog(specs()...), d, tc.gate)
			if err != nil {
				t.Fatal(err)
			}
			res, err := r.RunDurable(context.Background(), loop.Durable{Prompt: "go", RunID: protocol.RunID("policy-" + tc.name), Journal: j.Resume(-1)})
			if err != nil {
				t.Fatal(err)
			}
			d.Wait()
			echoes := 0
			for _, c := range res.Calls {
				if c.Tool != "echo" || c.Outcome == protocol.OutcomeRejected {
					continue
				}
				echoes++
				if c.Outcome != tc.outcome {
					t.Errorf("echo call %s: outcome %s, want %s", c.CallID, c.Outcome, tc.outcome)
				}
			}
			if echoes == 0 {
				t.Fatal("no echo call in the resumed run")
			}
			if got := len(tc.gate.Requests()); got != echoes {
				t.Errorf("the gate was asked %d times, want %d (every echo call)", got, echoes)
			}
			published := 0
			for _, name := range publishedTools(d) {
				if name == "echo" {
					published++
				}
			}
			if want := map[protocol.Outcome]int{protocol.OutcomeDenied: 0, protocol.OutcomeOK: echoes}[tc.outcome]; published != want {
				t.Errorf("%d echo calls published, want %d", published, want)
			}
		})
	}
}

// oldJournal is a journal whose start entry holds no policy, as an older
// coordinator wrote it.
type oldJournal struct{ *looptest.Journal }

func (j oldJournal) Entries() []loop.JournalEntry {
	es := j.Journal.Entries()
	for i := range es {
		es[i].Policy = nil
	}
	return es
}

// TestDurableWithoutPolicyFailsClosed: a journal without a policy is
// resumed with every call needing approval, even add, which no
// configuration named.
func TestDurableWithoutPolicyFailsClosed(t *testing.T) {
	j := handedOffAtApproval(t, "policy-old")
	var asked atomic.Int64
	d := looptest.New(handler)
	d.Durable = true
	gate := looptest.DenyAll("no")
	r, err := loop.New(loop.Config{}, durableModel(&asked), looptest.NewCatalog(specs()...), d, gate)
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.RunDurable(context.Background(), loop.Durable{Prompt: "go", RunID: "policy-old", Journal: oldJournal{j.Resume(-1)}})
	if err != nil {
		t.Fatal(err)
	}
	d.Wait()
	if n := len(d.Published()); n != 0 {
		t.Errorf("%d calls published from a journal without a policy, want 0 (every call needs approval, the gate denies)", n)
	}
	for _, c := range res.Calls {
		if c.Outcome == protocol.OutcomeOK {
			t.Errorf("call %s (%s) ran", c.CallID, c.Tool)
		}
	}
}

// TestDurablePolicyKeepsLimits: a run started with MaxRounds 1 and a
// tool-call budget of 1, resumed by a runner with the defaults, keeps both.
func TestDurablePolicyKeepsLimits(t *testing.T) {
	var asked atomic.Int64
	j := looptest.NewJournal()
	handoff := make(chan struct{})
	close(handoff)
	d := looptest.New(handler)
	d.Durable = true
	strict, err := loop.New(loop.Config{MaxRounds: 1, Budget: loop.Budget{ToolCalls: 1}}, durableModel(&asked), looptest.NewCatalog(specs()...), d, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := strict.RunDurable(context.Background(), loop.Durable{Prompt: "go", RunID: "policy-limits", Journal: j, Handoff: handoff}); !errors.Is(err, loop.ErrHandedOff) {
		t.Fatalf("first run: %v, want a hand-off", err)
	}
	lax, err := loop.New(loop.Config{}, durableModel(&asked), looptest.NewCatalog(specs()...), d, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := lax.RunDurable(context.Background(), loop.Durable{Prompt: "go", RunID: "policy-limits", Journal: j.Resume(-1)})
	if err != nil {
		t.Fatal(err)
	}
	d.Wait()
	if res.Metadata.Rounds > 1 {
		t.Errorf("resumed run made %d rounds, want at most the 1 it started with", res.Metadata.Rounds)
	}
	if n := len(d.Published()); n > 1 {
		t.Errorf("resumed run published %d calls, want at most its tool-call budget of 1", n)
	}
}
