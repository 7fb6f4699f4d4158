package loop_test

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/internal/testsync"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/loop/looptest"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// inputRound is a durable run whose first round has a slow call ("slow",
// running until release is closed) and two non-idempotent "pay" calls no
// worker claims (held queued); the test sends one input while the round
// gathers.
type inputRound struct {
	model   *looptest.Model
	disp    *looptest.Dispatcher
	journal *looptest.Journal
	input   chan loop.Input
	started chan struct{}
	release chan struct{}
	paid    atomic.Int64
	runner  *loop.Runner
}

func newInputRound(t *testing.T) *inputRound { return newInputRoundPay(t, false) }

// newInputRoundPay is newInputRound with pay idempotent or not.
func newInputRoundPay(t *testing.T, idempotent bool) *inputRound {
	t.Helper()
	ir := &inputRound{
		model: looptest.NewModel(
			looptest.Calls(looptest.Call("s", "slow", `{}`), looptest.Call("p1", "pay", `{"n":1}`), looptest.Call("p2", "pay", `{"n":2}`)),
			looptest.Answer("done")),
		journal: looptest.NewJournal(),
		input:   make(chan loop.Input, 1),
		started: make(chan struct{}),
		release: make(chan struct{}),
	}
	ir.disp = looptest.New(func(ctx context.Context, c protocol.Call) (protocol.Result, bool) {
		switch c.Tool {
		case "slow":
			close(ir.started)
			<-ir.release
			return looptest.OK("slow done"), true
		case "pay":
			ir.paid.Add(1)
			return looptest.OK("paid"), true
		}
		return protocol.Result{Outcome: protocol.OutcomeUnknownTool}, true
	})
	ir.disp.Withdrawals, ir.disp.Started = true, true
	ir.disp.Hold = func(c protocol.Call) bool { return c.Tool == "pay" }
	pay := looptest.MustSpec("pay", openSchema)
	pay.Idempotent = idempotent
	slow := looptest.MustSpec("slow", openSchema)
	slow.Idempotent = true
	var err error
	ir.runner, err = loop.New(loop.Config{Grace: 20 * time.Millisecond, CancelTimeout: time.Second},
		ir.model, looptest.NewCatalog(slow, pay), ir.disp, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ir.disp.Wait)
	return ir
}

// run runs the round, sending in once the slow call started; afterInput
// runs once the input was taken, before the slow call is released.
func (ir *inputRound) run(t *testing.T, in loop.Input, afterInput func()) *loop.Result {
	t.Helper()
	go func() {
		<-ir.started
		ir.input <- in
		afterInput()
		close(ir.release)
	}()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	res, err := ir.runner.RunDurable(ctx, loop.Durable{Prompt: "go", RunID: "run-input", Journal: ir.journal, Input: ir.input})
	if err != nil {
		t.Fatalf("RunDurable: %v", err)
	}
	checkInvariants(t, res)
	return res
}

// checkNextRequest asserts the model's second request holds a tool message
// for every call of round 1, then the new user message.
func checkNextRequest(t *testing.T, m *looptest.Model, text string) {
	t.Helper()
	reqs := m.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d model requests, want 2", len(reqs))
	}
	msgs := reqs[1].Messages
	var answered []string
	for _, msg := range msgs {
		if msg.Role == "tool" {
			answered = append(answered, msg.ToolCallID)
		}
	}
	if !slices.Equal(answered, []string{"s", "p1", "p2"}) {
		t.Fatalf("tool messages for %v, want s, p1, p2", answered)
	}
	last := msgs[len(msgs)-1]
	if last.Role != "user" || last.Content != text {
		t.Fatalf("the model's next request ends with %+v, want the user's %q", last, text)
	}
}

// An interrupt while a round gathers: the calls no worker claimed are
// withdrawn and answered interrupted (their handlers never run), the
// started one keeps its result, and the model's next request has every
// id answered and then the new message, which was journaled first.
func TestRunInputInterruptWithdrawsUnstartedCalls(t *testing.T) {
	ir := newInputRound(t)
	res := ir.run(t, loop.Input{Mode: loop.InputInterrupt, Content: "stop paying"}, func() {
		testsync.WaitUntil(t, 10*time.Second, "both pay calls withdrawn", func() bool { return len(ir.disp.Withdrawn()) == 2 })
	})
	if res.TerminationReason != loop.TerminationNatural {
		t.Fatalf("termination %s", res.TerminationReason)
	}
	want := map[string]protocol.Outcome{"s": protocol.OutcomeOK, "p1": protocol.OutcomeInterrupted, "p2": protocol.OutcomeInterrupted}
	for _, c := range res.Calls {
		if want[c.CallID] != c.Outcome {
			t.Fatalf("call %s: %s, want %s", c.CallID, c.Outcome, want[c.CallID])
		}
	}
	if n := ir.paid.Load(); n != 0 {
		t.Fatalf("a withdrawn pay call ran %d times", n)
	}
	if obs := toolMessages(res)["p1"]; obs != "Tool 'pay' was not run: the user interrupted this round with a new message." {
		t.Fatalf("observation %q", obs)
	}
	checkNextRequest(t, ir.model, "stop paying")
	checkInputJournaled(t, ir.journal, loop.InputInterrupt)
}

// An enqueue while a round gathers withdraws nothing: every call is
// answered as it would be, and the model's next request has the message.
func TestRunInputEnqueueSeenAtTheNextStep(t *testing.T) {
	ir := newInputRound(t)
	ir.disp.Hold = nil
	res := ir.run(t, loop.Input{Mode: loop.InputEnqueue, Content: "also note this"}, func() {
		testsync.WaitUntil(t, 10*time.Second, "the input journaled", func() bool { return inputEntries(ir.journal) == 1 })
	})
	for _, c := range res.Calls {
		if c.Outcome != protocol.OutcomeOK {
			t.Fatalf("call %s: %s, want ok", c.CallID, c.Outcome)
		}
	}
	if len(ir.disp.Asked()) != 0 || ir.paid.Load() != 2 {
		t.Fatalf("withdrawals asked %v, pay ran %d times", ir.disp.Asked(), ir.paid.Load())
	}
	checkNextRequest(t, ir.model, "also note this")
	checkInputJournaled(t, ir.journal, loop.InputEnqueue)
}

// inputEntries counts the journal's input entries.
func inputEntries(j *looptest.Journal) int {
	n := 0
	for _, e := range j.Resume(-1).Entries() {
		if e.Kind == loop.EntryInput {
			n++
		}
	}
	return n
}

// checkInputJournaled asserts one input entry of mode, following round 1,
// journaled before round 1's observations.
func checkInputJournaled(t *testing.T, j *looptest.Journal, mode loop.InputMode) {
	t.Helper()
	input, observed := -1, -1
	for i, e := range j.Resume(-1).Entries() {
		switch {
		case e.Kind == loop.EntryInput:
			if input >= 0 || e.Round != 1 || e.Input == nil || e.Input.Mode != mode {
				t.Fatalf("input entry %+v", e)
			}
			input = i
		case e.Kind == loop.EntryObserved && e.Round == 1:
			observed = i
		}
	}
	if input < 0 || observed < input {
		t.Fatalf("input entry at %d, round 1 observed at %d", input, observed)
	}
}

// A run resumed from a journal holding an input puts the message back at
// the same point: the resumed run's next model request is the original's.
func TestRunInputResumedAtTheSamePoint(t *testing.T) {
	ir := newInputRound(t)
	ir.run(t, loop.Input{Mode: loop.InputInterrupt, Content: "stop paying"}, func() {
		testsync.WaitUntil(t, 10*time.Second, "both pay calls withdrawn", func() bool { return len(ir.disp.Withdrawn()) == 2 })
	})
	entries := ir.journal.Resume(-1).Entries()
	cut := slices.IndexFunc(entries, func(e loop.JournalEntry) bool { return e.Kind == loop.EntryFinished })
	again := looptest.NewModel(looptest.Answer("done"))
	r, err := loop.New(loop.Config{}, again, looptest.NewCatalog(looptest.MustSpec("slow", openSchema), looptest.MustSpec("pay", openSchema)), looptest.New(handler), nil)
	if err != nil {
		t.Fatal(err)
	}
	// Drop round 2's model entry too: the resumed run asks round 2 again.
	for cut > 0 && entries[cut-1].Kind != loop.EntryObserved {
		cut--
	}
	res, err := r.RunDurable(t.Context(), loop.Durable{Prompt: "go", RunID: "run-input", Journal: ir.journal.Resume(cut)})
	if err != nil || res.TerminationReason != loop.TerminationNatural {
		t.Fatalf("resumed: %v %+v", err, res)
	}
	reqs := again.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d model requests", len(reqs))
	}
	got, _ := json.Marshal(reqs[0].Messages)
	want, _ := json.Marshal(ir.model.Requests()[1].Messages)
	if string(got) != string(want) {
		t.Fatalf("resumed request\n%s\nwant\n%s", got, want)
	}
}

// An input entry is refused by the release before inputs (its strict
// reader: every field of its JournalEntry, parking's reason the newest),
// on the input, so an older coordinator never resumes a run it would
// replay without the message.
func TestInputEntryRefusedByAnOlderReader(t *testing.T) {
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
		Reason       string          `json:"reason,omitempty"`
		Owner        string          `json:"owner,omitempty"`
		Secret       string          `json:"secret,omitempty"`
		Policy       json.RawMessage `json:"policy,omitempty"`
		Note         string          `json:"note,omitempty"`
		At           time.Time       `json:"at,omitzero"`
		Data         json.RawMessage `json:"data,omitempty"`
	}
	ir := newInputRound(t)
	ir.run(t, loop.Input{Mode: loop.InputInterrupt, Content: "stop paying"}, func() {
		testsync.WaitUntil(t, 10*time.Second, "both pay calls withdrawn", func() bool { return len(ir.disp.Withdrawn()) == 2 })
	})
	for _, e := range ir.journal.Resume(-1).Entries() {
		data, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		err = dec.Decode(new(olderEntry))
		switch {
		case e.Kind == loop.EntryInput && (err == nil || !strings.Contains(err.Error(), "input")):
			t.Fatalf("the input entry decoded by the older reader: %v, want refused on input", err)
		case e.Kind != loop.EntryInput && err != nil:
			t.Fatalf("entry %s refused by the older reader: %v", e.Kind, err)
		}
	}
}

// A replay of a run that took an input puts the message back where it
// was: with the same model's answers, the replay does not diverge and its
// round-2 request is the recorded one; nothing runs.
func TestRunInputReplayedAtTheSamePoint(t *testing.T) {
	ir := newInputRound(t)
	ir.run(t, loop.Input{Mode: loop.InputInterrupt, Content: "stop paying"}, func() {
		testsync.WaitUntil(t, 10*time.Second, "both pay calls withdrawn", func() bool { return len(ir.disp.Withdrawn()) == 2 })
	})
	again := looptest.NewModel(
		looptest.Calls(looptest.Call("s", "slow", `{}`), looptest.Call("p1", "pay", `{"n":1}`), looptest.Call("p2", "pay", `{"n":2}`)),
		looptest.Answer("done"))
	rep, err := loop.Replay(t.Context(), loop.Config{}, again, loop.ReplayInput{Entries: ir.journal.Resume(-1).Entries()})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Diverged || rep.NotReplayedCalls != 0 {
		t.Fatalf("replay diverged: %+v", rep)
	}
	got, _ := json.Marshal(again.Requests()[1].Messages)
	want, _ := json.Marshal(ir.model.Requests()[1].Messages)
	if string(got) != string(want) {
		t.Fatalf("replayed request\n%s\nwant\n%s", got, want)
	}
}

// An interrupt withdraws no idempotent call: the fleet cannot promise one
// already published never runs, so it is awaited and answered by its
// result.
func TestRunInputInterruptAwaitsIdempotentCalls(t *testing.T) {
	ir := newInputRoundPay(t, true)
	res := ir.run(t, loop.Input{Mode: loop.InputInterrupt, Content: "stop"}, func() {
		testsync.WaitUntil(t, 10*time.Second, "the input journaled", func() bool { return inputEntries(ir.journal) == 1 })
		for _, c := range ir.disp.Published() {
			if c.Tool == "pay" {
				ir.disp.Inject(c.RunID, loop.Event{Result: &protocol.Result{V: protocol.Version, RunID: c.RunID, CallKey: c.CallKey,
					Outcome: protocol.OutcomeOK, Output: "paid"}, Tool: "pay"})
			}
		}
	})
	if asked := ir.disp.Asked(); len(asked) != 0 {
		t.Fatalf("withdrawals asked for %v, want none", asked)
	}
	for _, c := range res.Calls {
		if c.Outcome != protocol.OutcomeOK {
			t.Fatalf("call %s: %s, want ok", c.CallID, c.Outcome)
		}
	}
	checkNextRequest(t, ir.model, "stop")
}
