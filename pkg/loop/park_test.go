package loop_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/loop/looptest"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// errModelDown is the failure of a model that cannot be reached.
var errModelDown = errors.New("model down")

// TestDurableParkAndResume: a durable run whose model fails in round 2
// parks (Durable.Park said so): its result says parked with the reason,
// every call of round 1 is answered, the journal ends with the parked
// entry and its data. Resumed from that journal once the model is back,
// it ends with the uninterrupted run's transcript, asks the model only
// for rounds 2 and 3, and runs no call of round 1 again.
func TestDurableParkAndResume(t *testing.T) {
	var executed atomic.Int64
	counting := func(ctx context.Context, c protocol.Call) (protocol.Result, bool) {
		executed.Add(1)
		return handler(ctx, c)
	}
	disp := looptest.New(counting)
	disp.Durable = true
	const run = "durable-park"
	want, err := durableRunner(t, durableModel(new(atomic.Int64)), disp, looptest.AllowAll()).
		RunDurable(context.Background(), loop.Durable{Prompt: "go", RunID: "durable-park-ref", Journal: looptest.NewJournal()})
	disp.Wait()
	if err != nil || want.TerminationReason != loop.TerminationNatural {
		t.Fatalf("uninterrupted run: %v, %+v", err, want)
	}
	executed.Store(0)

	var down atomic.Bool
	var asked atomic.Int64
	inner := durableModel(&asked)
	model := looptest.ModelFunc(func(req loop.Request) (*loop.Response, error) {
		if down.Load() {
			return nil, errModelDown
		}
		return inner.Complete(context.Background(), req)
	})
	park := func(err error) string {
		if errors.Is(err, errModelDown) {
			return "the model is down"
		}
		return ""
	}
	j := looptest.NewJournal()
	// Down from round 2 on: round 1's calls ran.
	disp.PublishErr = func(protocol.Call) error { down.Store(true); return nil }
	res, err := durableRunner(t, model, disp, looptest.AllowAll()).
		RunDurable(context.Background(), loop.Durable{Prompt: "go", RunID: run, Journal: j, Park: park, ParkData: []byte(`{"prompt":"go"}`)})
	disp.Wait()
	disp.PublishErr = nil
	if err != nil || res.TerminationReason != loop.TerminationParked || res.ParkReason != "the model is down" {
		t.Fatalf("run with the model down: %v, %s %q", err, res.TerminationReason, res.ParkReason)
	}
	checkInvariants(t, res)
	if n := executed.Load(); n != 2 {
		t.Fatalf("round 1 ran %d calls, want 2", n)
	}
	es := j.Resume(-1).Entries()
	last := es[len(es)-1]
	if last.Kind != loop.EntryParked || last.Round != 2 || last.Reason != "the model is down" || string(last.Data) != `{"prompt":"go"}` {
		t.Fatalf("last entry %+v, want parked in round 2 with its reason and data", last)
	}

	down.Store(false)
	asked.Store(0)
	got, err := durableRunner(t, model, disp, looptest.AllowAll()).
		RunDurable(context.Background(), loop.Durable{Prompt: "go", RunID: run, Journal: j.Resume(-1), Park: park})
	disp.Wait()
	if err != nil || got.TerminationReason != loop.TerminationNatural || got.ParkReason != "" {
		t.Fatalf("resumed run: %v, %s %q", err, got.TerminationReason, got.ParkReason)
	}
	if !reflect.DeepEqual(drawnIDs(got.Messages), drawnIDs(want.Messages)) {
		t.Fatalf("resumed run: transcript\n%+v\nwant\n%+v", got.Messages, want.Messages)
	}
	if n := asked.Load(); n != 2 {
		t.Fatalf("resumed run asked the model %d times, want 2 (rounds 2 and 3)", n)
	}
	if n := executed.Load(); n != 4 {
		t.Fatalf("calls ran %d times over the parked and the resumed run, want 4 (round 1's never again)", n)
	}
}

// TestDurableParkDeclined: a model failure Park gives no reason for, and
// one of a run without Park, fail the run as before.
func TestDurableParkDeclined(t *testing.T) {
	failing := looptest.ModelFunc(func(loop.Request) (*loop.Response, error) { return nil, errModelDown })
	for name, park := range map[string]func(error) string{"declined": func(error) string { return "" }, "no Park": nil} {
		t.Run(name, func(t *testing.T) {
			j := looptest.NewJournal()
			res, err := durableRunner(t, failing, looptest.New(handler), looptest.AllowAll()).
				RunDurable(context.Background(), loop.Durable{Prompt: "go", RunID: "durable-fail", Journal: j, Park: park})
			if !errors.Is(err, errModelDown) || res == nil || res.TerminationReason != loop.TerminationError {
				t.Fatalf("got %v, %+v; want the model's error and reason error", err, res)
			}
			if k := j.Kinds(); k[len(k)-1] != loop.EntryFinished {
				t.Fatalf("journal %v, want it to end finished", k)
			}
		})
	}
}

// drawnIDs replaces the call ids the loop drew (from each run's own
// secret) by their order.
func drawnIDs(msgs []loop.Message) []loop.Message {
	out := make([]loop.Message, len(msgs))
	ids := map[string]string{}
	id := func(s string) string {
		if !strings.HasPrefix(s, "call_") {
			return s
		}
		if ids[s] == "" {
			ids[s] = fmt.Sprintf("drawn-%d", len(ids))
		}
		return ids[s]
	}
	for i, m := range msgs {
		m.ToolCalls = append([]loop.ToolCall(nil), m.ToolCalls...)
		for k := range m.ToolCalls {
			m.ToolCalls[k].ID = id(m.ToolCalls[k].ID)
		}
		m.ToolCallID = id(m.ToolCallID)
		out[i] = m
	}
	return out
}

// TestParkedEntryRefusedByAnOlderReader: a journal entry as the release
// before parking decodes it (strictly, as natsbus does: every field of
// its JournalEntry, no other) refuses a parked entry on its reason, so an
// older coordinator never resumes a parked run it cannot read: it
// releases it. Every other entry of a parked run still decodes.
func TestParkedEntryRefusedByAnOlderReader(t *testing.T) {
	type olderEntry struct {
		Kind         string          `json:"kind"`
		Round        int             `json:"round,omitempty"`
		Tools        json.RawMessage `json:"tools,omitempty"`
		Response     json.RawMessage `json:"response,omitempty"`
		Calls        json.RawMessage `json:"calls,omitempty"`
		Deadline     time.Time       `json:"deadline,omitzero"`
		Decision     json.RawMessage `json:"decision,omitempty"`
		Observations json.RawMessage `json:"observations,omitempty"`
		Termination  string          `json:"termination,omitempty"`
		Answer       string          `json:"answer,omitempty"`
		Owner        string          `json:"owner,omitempty"`
		Secret       string          `json:"secret,omitempty"`
		Policy       json.RawMessage `json:"policy,omitempty"`
		Note         string          `json:"note,omitempty"`
		At           time.Time       `json:"at,omitzero"`
		Data         json.RawMessage `json:"data,omitempty"`
	}
	failing := looptest.ModelFunc(func(loop.Request) (*loop.Response, error) { return nil, errModelDown })
	j := looptest.NewJournal()
	res, err := durableRunner(t, failing, looptest.New(handler), looptest.AllowAll()).
		RunDurable(t.Context(), loop.Durable{Prompt: "go", RunID: "older-park", Journal: j, Park: func(error) string { return "down" }})
	if err != nil || res.TerminationReason != loop.TerminationParked {
		t.Fatalf("run: %v, %+v", err, res)
	}
	for _, e := range j.Resume(-1).Entries() {
		data, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		err = dec.Decode(new(olderEntry))
		switch {
		case e.Kind == loop.EntryParked && (err == nil || !strings.Contains(err.Error(), "reason")):
			t.Fatalf("the parked entry decoded by the older reader: %v, want refused on reason", err)
		case e.Kind != loop.EntryParked && err != nil:
			t.Fatalf("entry %s refused by the older reader: %v", e.Kind, err)
		}
	}
}

// TestParkedRunReplaysAndForks: a parked run has stopped: it is replayed
// (recorded as ended parked, the replay's new rounds reported) and forked
// up to the round it parked in, whose transcript holds round 1 answered
// from the journal; nothing runs.
func TestParkedRunReplaysAndForks(t *testing.T) {
	var executed atomic.Int64
	counting := func(ctx context.Context, c protocol.Call) (protocol.Result, bool) {
		executed.Add(1)
		return handler(ctx, c)
	}
	var down atomic.Bool
	inner := durableModel(new(atomic.Int64))
	model := looptest.ModelFunc(func(req loop.Request) (*loop.Response, error) {
		if down.Load() {
			return nil, errModelDown
		}
		return inner.Complete(context.Background(), req)
	})
	disp := looptest.New(counting)
	disp.PublishErr = func(protocol.Call) error { down.Store(true); return nil }
	j := looptest.NewJournal()
	res, err := durableRunner(t, model, disp, looptest.AllowAll()).
		RunDurable(t.Context(), loop.Durable{Prompt: "go", RunID: "parked-fork", Journal: j, Park: func(error) string { return "down" }})
	disp.Wait()
	if err != nil || res.TerminationReason != loop.TerminationParked {
		t.Fatalf("run: %v, %+v", err, res)
	}
	entries := j.Resume(-1).Entries()
	ran := executed.Load()

	down.Store(false)
	rep, err := loop.Replay(t.Context(), loop.Config{RequireApproval: []string{"echo"}}, durableModel(new(atomic.Int64)), loop.ReplayInput{Entries: entries})
	if err != nil {
		t.Fatalf("replay of a parked run: %v", err)
	}
	if rep.Recorded.Termination != loop.TerminationParked || rep.Recorded.Rounds != 1 || rep.ReplayedCalls != 2 || !rep.Diverged {
		t.Fatalf("replay report %+v, want recorded parked after 1 round, round 1's calls answered from the journal", rep)
	}
	msgs, err := loop.ForkMessages(t.Context(), entries, 2)
	if err != nil || len(msgs) != 4 || msgs[3].Role != "tool" {
		t.Fatalf("fork at the parked round: %v, %+v", err, msgs)
	}
	if _, err := loop.ForkMessages(t.Context(), entries, 3); !errors.Is(err, loop.ErrForkRound) {
		t.Fatalf("fork past the parked round: %v, want ErrForkRound", err)
	}
	if n := executed.Load(); n != ran {
		t.Fatalf("the replay and the fork ran %d calls", n-ran)
	}
}
