package deploy

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natsbus/dispatch"
	"github.com/toolfleet/toolfleet/internal/natsbus/stores"
	"github.com/toolfleet/toolfleet/internal/natsbus/workerbus"
	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/loop/looptest"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// H3 of the second trust review: the journal stream lost a live run's
// entries — 4,400 cancel requests of 1 MB on fleet.journal.cancel.junk,
// published by the operator, evicted them (discard old) — and the run,
// redelivered, started again from round 1 and ran a non-idempotent call
// twice. Against the shipped deploy/nats-server.conf, with a journal of
// 1 MiB (the shipped stream configuration otherwise):
//   - cancel requests go to their own stream: a flood of them leaves the
//     journals alone, and nobody but a coordinator writes a journal;
//   - a full journal refuses new entries instead of evicting a live run's
//     first ones;
//   - a run whose journal lost entries anyway (here an admin removes
//     them) ends journal_lost when it is resumed: the model is not asked
//     again, no call is published again, the tool ran once.
func TestHostileJournalLoss(t *testing.T) {
	t.Parallel()
	s := startFromConf(t)
	admin := connectAs(t, s, "admin")
	subjects := protocol.Subjects{}
	const journalBytes = 1 << 20
	if _, err := natsbus.Provision(t.Context(), admin.js, subjects, natsbus.StreamConfig{JournalMaxBytes: journalBytes}); err != nil {
		t.Fatalf("provisioning: %v", err)
	}
	coord := connectAs(t, s, "coordinator")
	operator := connectAs(t, s, "operator")
	worker := connectAs(t, s, "worker")

	var appends atomic.Int64
	handoff := make(chan struct{})
	var once sync.Once
	h, err := harness.New(harness.Config{}, harness.Tool{Name: "append", Parameters: json.RawMessage(`{"type":"object"}`),
		Run: func(context.Context, json.RawMessage) (string, error) {
			appends.Add(1)
			once.Do(func() { close(handoff) }) // the coordinator goes away after this round
			return "appended", nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	w, err := workerbus.NewWorker(worker.nc, worker.js, subjects, h, workerbus.WorkerConfig{Name: "appender", NoDiscovery: true,
		PollWait: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithCancel(context.Background())
	wdone := make(chan error, 1)
	go func() { wdone <- w.Run(wctx) }()
	t.Cleanup(func() { wcancel(); <-wdone })

	model := looptest.NewModel(
		looptest.Calls(looptest.Call("c1", "append", `{"line":"once"}`)),
		looptest.Calls(looptest.Call("c2", "append", `{"line":"twice"}`)),
		looptest.Answer("done"))
	r, err := loop.New(loop.Config{ToolTimeout: 30 * time.Second}, model, looptest.NewCatalog(h.Specs()...),
		dispatch.NewDispatcher(coord.nc, coord.js, subjects, dispatch.DispatcherConfig{}), nil)
	if err != nil {
		t.Fatal(err)
	}
	run := protocol.NewRunID()
	j, err := stores.OpenJournal(t.Context(), coord.js, subjects, run, "first", stores.NoteStart)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.RunDurable(t.Context(), loop.Durable{Prompt: "go", RunID: run, Journal: j, Handoff: handoff}); !errors.Is(err, loop.ErrHandedOff) {
		t.Fatalf("first owner: %v, want handed off after round 1", err)
	}
	if appends.Load() != 1 || len(model.Requests()) != 1 {
		t.Fatalf("after round 1: %d appends, %d model requests", appends.Load(), len(model.Requests()))
	}
	journal, _ := admin.js.Stream(t.Context(), subjects.JournalStream())
	before := streamMsgs(t, journal)

	// The flood of the review, within what the cancels stream admits.
	junk := strings.Repeat("x", 3000)
	for i := range 200 {
		if _, err := operator.js.Publish(t.Context(), "fleet.journal.cancel.junk"+string(rune('a'+i%26)),
			[]byte(`{"v":1,"reason":"`+junk+`"}`)); err != nil {
			t.Fatalf("operator: a cancel request: %v", err)
		}
	}
	if _, err := operator.js.Publish(t.Context(), "fleet.journal.cancel.big", []byte(strings.Repeat("x", 900<<10))); err == nil {
		t.Error("a cancel request of 900 KB was stored")
	}
	if got := streamMsgs(t, journal); got != before {
		t.Fatalf("the cancel flood changed the journal stream: %d messages, had %d", got, before)
	}
	if !refusedPub(t, operator, "fleet.journal.run."+string(run)) {
		t.Error("operator: publish into a run's journal not refused")
	}

	// Volume: other runs' journals fill the stream; it refuses, and this
	// run's journal is whole.
	filled := false
	var fillers []protocol.RunID
	for i := 0; i < 100 && !filled; i++ {
		fillers = append(fillers, protocol.NewRunID())
		other, err := stores.OpenJournal(t.Context(), coord.js, subjects, fillers[i], "filler", stores.NoteStart)
		if err != nil {
			filled = true
			break
		}
		for range 20 {
			if err := other.Append(t.Context(), loop.JournalEntry{Kind: loop.EntryModel, Note: strings.Repeat("y", 30<<10)}); err != nil {
				filled = true
				break
			}
		}
	}
	if !filled {
		t.Fatal("the journal stream never refused an entry")
	}
	recs, err := stores.ReadJournal(t.Context(), coord.js, subjects, run)
	if err != nil || len(recs) == 0 || recs[0].Entry.Kind != stores.EntryOwner || recs[0].Entry.Note != stores.NoteStart {
		t.Fatalf("the live run's journal after the stream filled: %d entries, %v", len(recs), err)
	}

	// Entries lost anyway: the run's first message (its owner's entry)
	// removed, the rest (its start, tools, model response and dispatch,
	// stored as one message) kept.
	subj, _ := subjects.Journal(run)
	second := uint64(0)
	for _, r := range recs {
		if r.Seq > recs[0].Seq {
			second = r.Seq
			break
		}
	}
	if second == 0 {
		t.Fatalf("the run's journal is one message: %+v", recs)
	}
	if err := journal.Purge(t.Context(), jetstream.WithPurgeSubject(subj), jetstream.WithPurgeSequence(second)); err != nil {
		t.Fatalf("admin: removing the run's first entries: %v", err)
	}
	for _, f := range fillers {
		fs, _ := subjects.Journal(f)
		if err := journal.Purge(t.Context(), jetstream.WithPurgeSubject(fs)); err != nil {
			t.Fatalf("admin: making room: %v", err)
		}
	}
	calls, _ := admin.js.Stream(t.Context(), subjects.CallsStream())
	callsBefore := lastSeq(t, calls)
	j2, err := stores.OpenJournal(t.Context(), coord.js, subjects, run, "second", stores.NoteResume)
	if err != nil {
		t.Fatalf("resume: %v", err)
	}
	res, err := r.RunDurable(t.Context(), loop.Durable{Prompt: "go", RunID: run, Journal: j2})
	if err != nil || res == nil || res.TerminationReason != loop.TerminationJournalLost {
		t.Fatalf("resumed from a journal that lost entries: %+v, %v; want journal_lost", res, err)
	}
	if appends.Load() != 1 || len(model.Requests()) != 1 || lastSeq(t, calls) != callsBefore {
		t.Fatalf("after the resume: %d appends, %d model requests, calls stream %d -> %d; want 1, 1, unchanged",
			appends.Load(), len(model.Requests()), callsBefore, lastSeq(t, calls))
	}

	// All of them lost: a run taken again finds nothing.
	if err := journal.Purge(t.Context(), jetstream.WithPurgeSubject(subj)); err != nil {
		t.Fatal(err)
	}
	j3, err := stores.OpenJournal(t.Context(), coord.js, subjects, run, "third", stores.NoteResume)
	if err != nil {
		t.Fatalf("resume: %v", err)
	}
	res, err = r.RunDurable(t.Context(), loop.Durable{Prompt: "go", RunID: run, Journal: j3})
	if err != nil || res == nil || res.TerminationReason != loop.TerminationJournalLost {
		t.Fatalf("resumed from an emptied journal: %+v, %v; want journal_lost", res, err)
	}
	if appends.Load() != 1 || len(model.Requests()) != 1 || lastSeq(t, calls) != callsBefore {
		t.Fatalf("after the second resume: %d appends, %d model requests; want 1, 1, nothing published", appends.Load(), len(model.Requests()))
	}
}

func streamMsgs(t *testing.T, st jetstream.Stream) uint64 {
	t.Helper()
	info, err := st.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

func lastSeq(t *testing.T, st jetstream.Stream) uint64 {
	t.Helper()
	info, err := st.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.LastSeq
}
