package loop_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/loop/looptest"
)

// lostJournal is a journal that says it lost entries.
type lostJournal struct{ *looptest.Journal }

func (lostJournal) Incomplete() bool { return true }

// TestDurableJournalLost: a run whose journal lost entries — its first
// ones gone (the loop steps that remain do not begin with its start), or
// the journal says so — is not resumed: it ends journal_lost at once,
// the model not asked, no call published, nothing appended.
func TestDurableJournalLost(t *testing.T) {
	var asked atomic.Int64
	disp := looptest.New(handler)
	disp.Durable = true
	full := looptest.NewJournal()
	const run = "journal-lost"
	if _, err := durableRunner(t, durableModel(&asked), disp, looptest.AllowAll()).
		RunDurable(context.Background(), loop.Durable{Prompt: "go", RunID: run, Journal: full}); err != nil {
		t.Fatal(err)
	}
	disp.Wait()
	published := len(disp.Published())
	entries := full.Resume(-1).Entries()
	// Everything but the last entry that is not the finish: a run lost
	// mid-way.
	last := len(entries) - 1
	for entries[last].Kind == loop.EntryFinished || entries[last].Kind == loop.EntryModel {
		last--
	}
	for name, j := range map[string]loop.Journal{
		"first entries evicted": journalOf(t, entries[3:last]),
		"says it lost entries":  lostJournal{looptest.NewJournal()},
	} {
		t.Run(name, func(t *testing.T) {
			var resumedAsks atomic.Int64
			before := len(j.Entries())
			res, err := durableRunner(t, durableModel(&resumedAsks), disp, looptest.AllowAll()).
				RunDurable(context.Background(), loop.Durable{Prompt: "go", RunID: run, Journal: j})
			disp.Wait()
			if err != nil || res == nil || res.TerminationReason != loop.TerminationJournalLost {
				t.Fatalf("got %+v, %v; want journal_lost", res, err)
			}
			if resumedAsks.Load() != 0 || len(disp.Published()) != published || len(res.Calls) != 0 {
				t.Fatalf("the model was asked %d times, %d calls published again, %d calls made",
					resumedAsks.Load(), len(disp.Published())-published, len(res.Calls))
			}
			if lj, ok := j.(*looptest.Journal); ok && lj.Len() != before {
				t.Fatalf("%d entries appended to a lost journal", lj.Len()-before)
			}
		})
	}
}

// journalOf is a journal holding entries.
func journalOf(t *testing.T, entries []loop.JournalEntry) *looptest.Journal {
	t.Helper()
	j := looptest.NewJournal()
	for _, e := range entries {
		if err := j.Append(context.Background(), e); err != nil {
			t.Fatal(err)
		}
	}
	return j.Resume(-1)
}
