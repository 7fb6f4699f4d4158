package loop_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/loop/looptest"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// durableModel answers by how many tool messages the transcript holds, so
// the same transcript always gets the same answer: round 1 calls echo and
// add, round 2 calls echo (which needs approval) and a repeated id, round 3
// answers. It counts its calls.
func durableModel(calls *atomic.Int64) *looptest.Model {
	return looptest.ModelFunc(func(req loop.Request) (*loop.Response, error) {
		calls.Add(1)
		tools := 0
		for _, m := range req.Messages {
			if m.Role == "tool" {
				tools++
			}
		}
		switch tools {
		case 0:
			return &loop.Response{Message: loop.Message{Role: "assistant", ToolCalls: []loop.ToolCall{
				looptest.Call("c1", "echo", `{"text":"one"}`), looptest.Call("c2", "add", `{"a":1,"b":2}`),
			}}}, nil
		case 2:
			return &loop.Response{Message: loop.Message{Role: "assistant", ToolCalls: []loop.ToolCall{
				looptest.Call("c3", "echo", `{"text":"two"}`), looptest.Call("c3", "echo", `{"text":"again"}`),
				looptest.Call("", "add", `{"a":2,"b":2}`),
			}}}, nil
		default:
			return &loop.Response{Message: loop.Message{Role: "assistant", Content: fmt.Sprintf("done after %d", tools)}}, nil
		}
	})
}

func durableRunner(t *testing.T, model loop.Model, d loop.Dispatcher, gate loop.Gate) *loop.Runner {
	t.Helper()
	r, err := loop.New(loop.Config{RequireApproval: []string{"echo"}}, model, looptest.NewCatalog(specs()...), d, gate)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// callsWithoutTimes drops what differs between two runs of one transcript.
func callsWithoutTimes(cs []loop.CallRecord) []loop.CallRecord {
	out := append([]loop.CallRecord(nil), cs...)
	for i := range out {
		out[i].DurationMS = 0
	}
	return out
}

// TestDurableResumeAtEveryEntry crashes a run after each of its journal
// entries and resumes it from there: the resumed run ends with the
// uninterrupted run's transcript and calls, asks the model only for the
// rounds not journaled, and runs no call twice.
func TestDurableResumeAtEveryEntry(t *testing.T) {
	var executed, unproven atomic.Int64
	counting := func(ctx context.Context, c protocol.Call) (protocol.Result, bool) {
		executed.Add(1)
		return handler(ctx, c)
	}
	var asked atomic.Int64
	disp := looptest.New(counting)
	disp.Durable = true
	disp.PublishErr = func(c protocol.Call) error {
		if c.RequiresApproval && c.Approval == nil {
			unproven.Add(1) // a worker would refuse it
		}
		return nil
	}
	full := looptest.NewJournal()
	const run = "durable-run-1"
	want, err := durableRunner(t, durableModel(&asked), disp, looptest.AllowAll()).
		RunDurable(context.Background(), loop.Durable{Prompt: "go", RunID: run, Journal: full})
	if err != nil || want.TerminationReason != loop.TerminationNatural {
		t.Fatalf("uninterrupted run: %v, %+v", err, want)
	}
	disp.Wait()
	if asked.Load() != 3 || executed.Load() != 4 {
		t.Fatalf("uninterrupted run asked %d rounds and ran %d calls, want 3 and 4", asked.Load(), executed.Load())
	}
	kinds := full.Kinds()
	t.Logf("journal: %v", kinds)
	// From entry 1: with nothing journaled, not even its start, a run has
	// done nothing and starts afresh (with new call keys).
	for n := 1; n <= len(kinds); n++ {
		prefix := full.Resume(n)
		journaledRounds := 0
		for _, e := range prefix.Entries() {
			if e.Kind == loop.EntryModel {
				journaledRounds++
			}
		}
		var resumedAsks atomic.Int64
		got, err := durableRunner(t, durableModel(&resumedAsks), disp, looptest.AllowAll()).
			RunDurable(context.Background(), loop.Durable{Prompt: "go", RunID: run, Journal: prefix})
		disp.Wait()
		if err != nil {
			t.Fatalf("resumed after entry %d: %v", n, err)
		}
		if !reflect.DeepEqual(got.Messages, want.Messages) {
			t.Fatalf("resumed after entry %d: transcript\n%+v\nwant\n%+v", n, got.Messages, want.Messages)
		}
		if !reflect.DeepEqual(callsWithoutTimes(got.Calls), callsWithoutTimes(want.Calls)) {
			t.Fatalf("resumed after entry %d: calls\n%+v\nwant\n%+v", n, got.Calls, want.Calls)
		}
		if got.Answer != want.Answer || got.TerminationReason != want.TerminationReason {
			t.Fatalf("resumed after entry %d: %q %s", n, got.Answer, got.TerminationReason)
		}
		if w := int64(3 - journaledRounds); resumedAsks.Load() != w {
			t.Fatalf("resumed after entry %d: model asked %d times, want %d", n, resumedAsks.Load(), w)
		}
	}
	if executed.Load() != 4 {
		t.Fatalf("calls ran %d times over all resumes, want 4", executed.Load())
	}
	if n := unproven.Load(); n != 0 {
		t.Fatalf("%d approved calls were published without their approval's proof", n)
	}
}

// TestDurableResumeTakesTheFirstStoredResult: a resumed run reads the
// results stored for its calls and takes the first stored for each call, as a live run takes the first to arrive: a
// stale attempt's result stored after it (a second worker's run of a
// redelivered call, stored apart because it went in another batch) does
// not replace it.
func TestDurableResumeTakesTheFirstStoredResult(t *testing.T) {
	var asked atomic.Int64
	disp := looptest.New(handler)
	disp.Durable = true
	full := looptest.NewJournal()
	const run = "durable-first-result"
	want, err := durableRunner(t, durableModel(&asked), disp, looptest.AllowAll()).
		RunDurable(context.Background(), loop.Durable{Prompt: "go", RunID: run, Journal: full})
	if err != nil || want.TerminationReason != loop.TerminationNatural {
		t.Fatalf("uninterrupted run: %v, %+v", err, want)
	}
	disp.Wait()
	for _, c := range disp.Published() {
		disp.Store(run, protocol.Result{V: protocol.Version, RunID: run, CallKey: c.CallKey,
			Outcome: protocol.OutcomeOK, Output: "stale", Worker: "stale-worker", Attempt: 2})
	}
	for _, n := range []int{1, 3} { // the start; and round 1's tools and model entries
		got, err := durableRunner(t, durableModel(new(atomic.Int64)), disp, looptest.AllowAll()).
			RunDurable(context.Background(), loop.Durable{Prompt: "go", RunID: run, Journal: full.Resume(n)})
		disp.Wait()
		if err != nil {
			t.Fatalf("resumed after entry %d: %v", n, err)
		}
		if !reflect.DeepEqual(got.Messages, want.Messages) {
			t.Fatalf("resumed after entry %d: transcript\n%+v\nwant\n%+v", n, got.Messages, want.Messages)
		}
	}
}

// TestDurableFencedStopsBeforeEffects: an owner whose append is refused
// stops at once: nil result, ErrFenced, and nothing published after the
// refused entry.
func TestDurableFencedStopsBeforeEffects(t *testing.T) {
	probe := looptest.NewJournal()
	var asked atomic.Int64
	d0 := looptest.New(handler)
	d0.Durable = true
	if _, err := durableRunner(t, durableModel(&asked), d0, looptest.AllowAll()).
		RunDurable(context.Background(), loop.Durable{Prompt: "go", RunID: "fenced-0", Journal: probe}); err != nil {
		t.Fatal(err)
	}
	for i, k := range probe.Kinds() {
		if k != loop.EntryDispatched {
			continue
		}
		d := looptest.New(handler)
		d.Durable = true
		j := looptest.NewJournal()
		j.FailAt = i + 1
		res, err := durableRunner(t, durableModel(&asked), d, looptest.AllowAll()).
			RunDurable(context.Background(), loop.Durable{Prompt: "go", RunID: "fenced-1", Journal: j})
		if res != nil || !errors.Is(err, loop.ErrFenced) || !errors.Is(err, loop.ErrJournal) {
			t.Fatalf("fenced at entry %d: %v, %v", i+1, res, err)
		}
		before := 0
		for _, k := range probe.Kinds()[:i] {
			if k == loop.EntryDispatched {
				before++
			}
		}
		// Each earlier dispatch published its round's calls (2 in round 1);
		// the fenced one published nothing.
		if want := []int{0, 2}[before]; len(d.Published()) != want {
			t.Fatalf("fenced at dispatch %d: %d calls published, want %d", before+1, len(d.Published()), want)
		}
		if len(d.Cancels()) != 0 {
			t.Fatalf("fenced run sent cancels: %v", d.Cancels())
		}
		d.Wait()
	}
}

// TestDurableHandoff: a run handed off stops with ErrHandedOff and no
// result, and another owner finishes it from the journal.
func TestDurableHandoff(t *testing.T) {
	var asked atomic.Int64
	d := looptest.New(handler)
	d.Durable = true
	j := looptest.NewJournal()
	handoff := make(chan struct{})
	gate := &looptest.Gate{Func: func(ctx context.Context, req protocol.ApprovalRequest) (loop.Decision, error) {
		close(handoff) // hand off while the approval waits
		<-ctx.Done()
		return loop.Decision{}, ctx.Err()
	}}
	res, err := durableRunner(t, durableModel(&asked), d, gate).
		RunDurable(context.Background(), loop.Durable{Prompt: "go", RunID: "handoff-1", Journal: j, Handoff: handoff})
	if res != nil || !errors.Is(err, loop.ErrHandedOff) {
		t.Fatalf("handed-off run: %v, %v", res, err)
	}
	if len(d.Cancels()) != 0 {
		t.Fatalf("handed-off run sent cancels: %v", d.Cancels())
	}
	d.Wait()
	got, err := durableRunner(t, durableModel(&asked), d, looptest.AllowAll()).
		RunDurable(context.Background(), loop.Durable{Prompt: "go", RunID: "handoff-1", Journal: j.Resume(-1)})
	if err != nil || got.TerminationReason != loop.TerminationNatural {
		t.Fatalf("resumed: %v %+v", err, got)
	}
	if asked.Load() != 3 {
		t.Fatalf("model asked %d times over the hand-off, want 3", asked.Load())
	}
	if err := looptest.CheckTranscript(got.Messages); err != nil {
		t.Fatal(err)
	}
}

// TestDurableResumedCallsWithoutResults: a run stopped after its calls
// were published, resumed where no result ever comes: the non-idempotent
// call, which may have started on a worker the resumed run cannot hear
// from, ends outcome_unknown at its journaled deadline; the idempotent one
// ends timeout. Neither is published again.
func TestDurableResumedCallsWithoutResults(t *testing.T) {
	idem := looptest.MustSpec("retry", openSchema)
	idem.Idempotent = true
	cat := looptest.NewCatalog(append(specs(), idem)...)
	model := looptest.NewModel(
		looptest.Calls(looptest.Call("h", "hang", `{}`), looptest.Call("r", "retry", `{}`)),
		looptest.Answer("done"))
	cfg := loop.Config{ToolTimeout: 300 * time.Millisecond, Grace: 50 * time.Millisecond}
	never := func(context.Context, protocol.Call) (protocol.Result, bool) { return protocol.Result{}, false }
	d := looptest.New(never)
	d.Durable = true
	j := looptest.NewJournal()
	j.FailAt = 6 // start, tools, model, dispatched, published, then fenced
	r, err := loop.New(cfg, model, cat, d, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.RunDurable(context.Background(), loop.Durable{Prompt: "go", RunID: "resume-open", Journal: j}); !errors.Is(err, loop.ErrFenced) {
		t.Fatalf("first owner: %v", err)
	}
	if k := j.Kinds(); len(k) != 5 || k[4] != loop.EntryPublished {
		t.Fatalf("journal %v", k)
	}
	d2 := looptest.New(never)
	d2.Durable = true
	r2, _ := loop.New(cfg, looptest.NewModel(looptest.Answer("done")), cat, d2, nil)
	res, err := r2.RunDurable(context.Background(), loop.Durable{Prompt: "go", RunID: "resume-open", Journal: j.Resume(-1)})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]protocol.Outcome{}
	for _, c := range res.Calls {
		got[c.CallID] = c.Outcome
	}
	if got["h"] != protocol.OutcomeUnknown || got["r"] != protocol.OutcomeTimeout {
		t.Fatalf("outcomes %v, want h outcome_unknown and r timeout", got)
	}
	if len(d2.Published()) != 0 {
		t.Fatalf("the resumed run published %d calls again", len(d2.Published()))
	}
}

// TestDurableApprovalKeepsItsDeadline: a run stopped while an approval
// waits asks the gate again, after resuming, with the original deadline.
func TestDurableApprovalKeepsItsDeadline(t *testing.T) {
	var asked atomic.Int64
	j := looptest.NewJournal()
	handoff := make(chan struct{})
	var first protocol.ApprovalRequest
	gate := &looptest.Gate{Func: func(ctx context.Context, req protocol.ApprovalRequest) (loop.Decision, error) {
		first = req
		close(handoff)
		<-ctx.Done()
		return loop.Decision{}, ctx.Err()
	}}
	d := looptest.New(handler)
	d.Durable = true
	if _, err := durableRunner(t, durableModel(&asked), d, gate).
		RunDurable(context.Background(), loop.Durable{Prompt: "go", RunID: "deadline-1", Journal: j, Handoff: handoff}); !errors.Is(err, loop.ErrHandedOff) {
		t.Fatal(err)
	}
	d.Wait()
	allow := looptest.AllowAll()
	if _, err := durableRunner(t, durableModel(&asked), d, allow).
		RunDurable(context.Background(), loop.Durable{Prompt: "go", RunID: "deadline-1", Journal: j.Resume(-1)}); err != nil {
		t.Fatal(err)
	}
	reqs := allow.Requests()
	if len(reqs) == 0 || !reqs[0].Deadline.Equal(first.Deadline) || reqs[0].CallKey != first.CallKey {
		t.Fatalf("resumed approval request %+v, want deadline %v and key %s", reqs, first.Deadline, first.CallKey)
	}
}

// TestDurableResumePastTheDedupWindow: a run stopped after journaling its
// dispatch and before journaling that its publishes returned is resumed.
// Within the dedup window both calls are published again (deduplicated by
// key downstream); past it the non-idempotent one is not — a second
// publish could run it twice — and ends outcome_unknown, while the
// idempotent one is published again and answered.
func TestDurableResumePastTheDedupWindow(t *testing.T) {
	idem := looptest.MustSpec("retry", openSchema)
	idem.Idempotent = true
	cat := looptest.NewCatalog(append(specs(), idem)...)
	answerRetry := func(ctx context.Context, c protocol.Call) (protocol.Result, bool) {
		if c.Tool != "retry" {
			return protocol.Result{}, false
		}
		return looptest.OK("retried"), true
	}
	for _, tt := range []struct {
		name      string
		window    time.Duration
		published []protocol.ToolName
		hang      protocol.Outcome
	}{
		{"within the window", time.Hour, []protocol.ToolName{"hang", "retry"}, protocol.OutcomeUnknown},
		{"past the window", time.Nanosecond, []protocol.ToolName{"retry"}, protocol.OutcomeUnknown},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := loop.Config{ToolTimeout: 300 * time.Millisecond, Grace: 50 * time.Millisecond, DedupWindow: tt.window}
			model := looptest.NewModel(
				looptest.Calls(looptest.Call("h", "hang", `{}`), looptest.Call("r", "retry", `{}`)),
				looptest.Answer("done"))
			never := func(context.Context, protocol.Call) (protocol.Result, bool) { return protocol.Result{}, false }
			d := looptest.New(never)
			d.Durable = true
			j := looptest.NewJournal()
			j.FailAt = 5 // start, tools, model, dispatched, then fenced at published
			r, err := loop.New(cfg, model, cat, d, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := r.RunDurable(context.Background(), loop.Durable{Prompt: "go", RunID: protocol.RunID("dedup-" + fmt.Sprint(tt.window)), Journal: j}); !errors.Is(err, loop.ErrFenced) {
				t.Fatalf("first owner: %v", err)
			}
			if k := j.Kinds(); len(k) != 4 || k[3] != loop.EntryDispatched {
				t.Fatalf("journal %v, want it to end at the dispatch", k)
			}
			d2 := looptest.New(answerRetry)
			d2.Durable = true
			r2, _ := loop.New(cfg, looptest.NewModel(looptest.Answer("done")), cat, d2, nil)
			res, err := r2.RunDurable(context.Background(), loop.Durable{Prompt: "go", RunID: protocol.RunID("dedup-" + fmt.Sprint(tt.window)), Journal: j.Resume(-1)})
			if err != nil {
				t.Fatal(err)
			}
			d2.Wait()
			var tools []protocol.ToolName
			for _, c := range d2.Published() {
				tools = append(tools, c.Tool)
			}
			slices.Sort(tools)
			if !slices.Equal(tools, tt.published) {
				t.Fatalf("the resumed run published %v, want %v", tools, tt.published)
			}
			got := map[string]protocol.Outcome{}
			for _, c := range res.Calls {
				got[c.CallID] = c.Outcome
			}
			if got["h"] != tt.hang || got["r"] != protocol.OutcomeOK {
				t.Fatalf("outcomes %v, want h %s and r ok", got, tt.hang)
			}
		})
	}
}

// growingCatalog offers specs() in its first answer and specs() and
// "extra" in every later one.
type growingCatalog struct{ asked atomic.Int64 }

func (c *growingCatalog) Tools(context.Context) ([]protocol.ToolSpec, error) {
	if c.asked.Add(1) == 1 {
		return specs(), nil
	}
	return append(specs(), looptest.MustSpec("extra", openSchema)), nil
}

// TestDurableToolsJournaledWhenTheyChange: a round offered what the round
// before was journals no tools entry, one offered something else does; a
// run resumed after a round whose model response is journaled without its
// own tools entry offers that round the last journaled tools, whatever the
// catalog says now.
func TestDurableToolsJournaledWhenTheyChange(t *testing.T) {
	model := func() *looptest.Model {
		return looptest.ModelFunc(func(req loop.Request) (*loop.Response, error) {
			tools := 0
			for _, m := range req.Messages {
				if m.Role == "tool" {
					tools++
				}
			}
			switch tools {
			case 0, 1:
				name := []string{"echo", "extra"}[tools]
				return &loop.Response{Message: loop.Message{Role: "assistant", ToolCalls: []loop.ToolCall{
					looptest.Call(fmt.Sprint("c", tools), name, `{"text":"x"}`)}}}, nil
			case 2:
				return &loop.Response{Message: loop.Message{Role: "assistant", ToolCalls: []loop.ToolCall{
					looptest.Call("c2", "extra", `{}`)}}}, nil
			default:
				return &loop.Response{Message: loop.Message{Role: "assistant", Content: "done"}}, nil
			}
		})
	}
	any := func(ctx context.Context, c protocol.Call) (protocol.Result, bool) {
		return looptest.OK(string(c.Tool)), true
	}
	d := looptest.New(any)
	d.Durable = true
	full := looptest.NewJournal()
	r, err := loop.New(loop.Config{}, model(), &growingCatalog{}, d, nil)
	if err != nil {
		t.Fatal(err)
	}
	want, err := r.RunDurable(context.Background(), loop.Durable{Prompt: "go", RunID: "tools-change", Journal: full})
	if err != nil || want.TerminationReason != loop.TerminationNatural {
		t.Fatalf("run: %v %+v", err, want)
	}
	d.Wait()
	var toolRounds []int
	for _, e := range full.Resume(-1).Entries() {
		if e.Kind == loop.EntryTools {
			toolRounds = append(toolRounds, e.Round)
		}
	}
	// Round 1 offers specs(); round 2 adds extra; rounds 3 and 4 offer
	// the same as round 2.
	if !slices.Equal(toolRounds, []int{1, 2}) {
		t.Fatalf("tools journaled for rounds %v, want [1 2]; journal %v", toolRounds, full.Kinds())
	}
	for _, c := range want.Calls {
		if c.Outcome != protocol.OutcomeOK {
			t.Fatalf("uninterrupted run: call %s %s", c.CallID, c.Outcome)
		}
	}
	for n := 1; n <= full.Len(); n++ {
		prefix := full.Resume(n)
		// The catalog no longer offers extra: a round whose model response
		// is journaled must be offered what it was offered then.
		models := 0
		for _, e := range prefix.Entries() {
			if e.Kind == loop.EntryModel {
				models++
			}
		}
		if models < 3 {
			continue // a round not journaled asks the catalog again
		}
		r2, _ := loop.New(loop.Config{}, model(), looptest.NewCatalog(specs()...), d, nil)
		got, err := r2.RunDurable(context.Background(), loop.Durable{Prompt: "go", RunID: "tools-change", Journal: prefix})
		d.Wait()
		if err != nil {
			t.Fatalf("resumed after entry %d: %v", n, err)
		}
		if !reflect.DeepEqual(callsWithoutTimes(got.Calls), callsWithoutTimes(want.Calls)) {
			t.Fatalf("resumed after entry %d: calls\n%+v\nwant\n%+v", n, got.Calls, want.Calls)
		}
	}
}

// TestDurableHandoffKeepsAHeldResponse: a model response is held back to
// be journaled with the round's next entry; a run handed off while the
// model answers journals it alone before it stops, so the owner that
// resumes the run does not ask that round again.
func TestDurableHandoffKeepsAHeldResponse(t *testing.T) {
	var asked atomic.Int64
	handoff := make(chan struct{})
	inner := durableModel(&asked)
	model := looptest.ModelFunc(func(req loop.Request) (*loop.Response, error) {
		if asked.Load() == 0 {
			close(handoff) // hand off while the first round's model answers
		}
		return inner.Complete(context.Background(), req)
	})
	d := looptest.New(handler)
	d.Durable = true
	j := looptest.NewJournal()
	res, err := durableRunner(t, model, d, looptest.AllowAll()).
		RunDurable(context.Background(), loop.Durable{Prompt: "go", RunID: "handoff-held", Journal: j, Handoff: handoff})
	if res != nil || !errors.Is(err, loop.ErrHandedOff) {
		t.Fatalf("handed-off run: %v, %v", res, err)
	}
	if k := j.Kinds(); len(k) != 3 || k[2] != loop.EntryModel {
		t.Fatalf("journal %v, want start, tools, model", k)
	}
	if len(d.Published()) != 0 {
		t.Fatalf("the handed-off run published %d calls", len(d.Published()))
	}
	got, err := durableRunner(t, durableModel(&asked), d, looptest.AllowAll()).
		RunDurable(context.Background(), loop.Durable{Prompt: "go", RunID: "handoff-held", Journal: j.Resume(-1)})
	d.Wait()
	if err != nil || got.TerminationReason != loop.TerminationNatural {
		t.Fatalf("resumed: %v %+v", err, got)
	}
	if asked.Load() != 3 {
		t.Fatalf("model asked %d times over the hand-off, want 3", asked.Load())
	}
}

// TestJournaledRoundWaitsOnce: a durable run whose model and tools answer
// at once stores one journal message a round, and waits for it — the
// round's model response with its dispatch, and the round before's
// observations with them; its first carries its start and its tools, its
// last the last round's observations and its end. It journals no publish:
// each round's results came before publishedWait.
func TestJournaledRoundWaitsOnce(t *testing.T) {
	defer loop.SetHeldModelWait(time.Hour)() // a model as fast as this one's
	defer loop.SetPublishedWait(time.Hour)() // tools as fast as these
	const rounds = 3
	model := looptest.ModelFunc(func(req loop.Request) (*loop.Response, error) {
		tools := 0
		for _, m := range req.Messages {
			if m.Role == "tool" {
				tools++
			}
		}
		if tools == rounds {
			return &loop.Response{Message: loop.Message{Role: "assistant", Content: "done"}}, nil
		}
		return &loop.Response{Message: loop.Message{Role: "assistant", ToolCalls: []loop.ToolCall{
			looptest.Call(fmt.Sprintf("c%d", tools), "add", `{"a":1,"b":2}`)}}}, nil
	})
	d := looptest.New(handler)
	d.Durable = true
	r, err := loop.New(loop.Config{}, model, looptest.NewCatalog(specs()...), d, looptest.AllowAll())
	if err != nil {
		t.Fatal(err)
	}
	j := looptest.NewJournal()
	res, err := r.RunDurable(t.Context(), loop.Durable{Prompt: "go", RunID: "waits-once", Journal: j})
	if err != nil || res.TerminationReason != loop.TerminationNatural {
		t.Fatalf("run: %v, %+v", err, res)
	}
	waited, pipelined := j.Stores()
	if waited != rounds+1 || pipelined != 0 {
		t.Errorf("the run waited for %d stores and pipelined %d, want %d (one a model response) and none",
			waited, pipelined, rounds+1)
	}
	want := []string{loop.EntryStart, loop.EntryTools}
	for range rounds {
		want = append(want, loop.EntryModel, loop.EntryDispatched, loop.EntryObserved)
	}
	want = append(want, loop.EntryModel, loop.EntryFinished)
	if got := j.Kinds(); !slices.Equal(got, want) {
		t.Errorf("journal %v, want %v", got, want)
	}
}

// TestSlowModelHoldsNoObservations: while a model takes its time, the
// observations held for its response are stored without it, so whoever
// follows the journal sees the round's answers before the next model
// response; the journal is the same as a fast model's.
func TestSlowModelHoldsNoObservations(t *testing.T) {
	defer loop.SetHeldModelWait(time.Millisecond)()
	defer loop.SetPublishedWait(time.Hour)()
	j := looptest.NewJournal()
	stored := func(kind string) bool { return slices.Contains(j.Kinds(), kind) }
	var sawObserved bool
	model := looptest.ModelFunc(func(req loop.Request) (*loop.Response, error) {
		if len(req.Messages) == 1 {
			return &loop.Response{Message: loop.Message{Role: "assistant", ToolCalls: []loop.ToolCall{
				looptest.Call("c1", "add", `{"a":1,"b":2}`)}}}, nil
		}
		// The model answers once the round's observations are stored (or
		// the test gives up).
		deadline := time.Now().Add(10 * time.Second)
		for !stored(loop.EntryObserved) && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		sawObserved = stored(loop.EntryObserved)
		return &loop.Response{Message: loop.Message{Role: "assistant", Content: "done"}}, nil
	})
	d := looptest.New(handler)
	d.Durable = true
	r, err := loop.New(loop.Config{}, model, looptest.NewCatalog(specs()...), d, looptest.AllowAll())
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.RunDurable(t.Context(), loop.Durable{Prompt: "go", RunID: "slow-model", Journal: j})
	if err != nil || res.TerminationReason != loop.TerminationNatural {
		t.Fatalf("run: %v, %+v", err, res)
	}
	if !sawObserved {
		t.Fatal("the round's observations were not stored while the model thought")
	}
	want := []string{loop.EntryStart, loop.EntryTools, loop.EntryModel, loop.EntryDispatched,
		loop.EntryObserved, loop.EntryModel, loop.EntryFinished}
	if got := j.Kinds(); !slices.Equal(got, want) {
		t.Errorf("journal %v, want %v", got, want)
	}
}

// TestSlowRoundJournalsItsPublish: a round still gathering its results
// publishedWait after its publishes returned journals that they did,
// without waiting for the store, and before its observations.
func TestSlowRoundJournalsItsPublish(t *testing.T) {
	defer loop.SetPublishedWait(time.Millisecond)()
	j := looptest.NewJournal()
	release := make(chan struct{})
	slow := func(ctx context.Context, c protocol.Call) (protocol.Result, bool) {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return handler(ctx, protocol.Call{Tool: "add", Arguments: c.Arguments})
	}
	model := looptest.NewModel(looptest.Calls(looptest.Call("c1", "add", `{"a":1,"b":2}`)), looptest.Answer("done"))
	d := looptest.New(slow)
	d.Durable = true
	r, err := loop.New(loop.Config{}, model, looptest.NewCatalog(specs()...), d, looptest.AllowAll())
	if err != nil {
		t.Fatal(err)
	}
	// The call is answered once the publish is journaled (or the test
	// gives up).
	var sawPublished atomic.Bool
	go func() {
		defer close(release)
		deadline := time.Now().Add(10 * time.Second)
		for !slices.Contains(j.Kinds(), loop.EntryPublished) && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		sawPublished.Store(slices.Contains(j.Kinds(), loop.EntryPublished))
	}()
	res, err := r.RunDurable(t.Context(), loop.Durable{Prompt: "go", RunID: "slow-round", Journal: j})
	if err != nil || res.TerminationReason != loop.TerminationNatural {
		t.Fatalf("run: %v, %+v", err, res)
	}
	if !sawPublished.Load() {
		t.Fatal("the publish was not journaled while the round gathered")
	}
	if _, pipelined := j.Stores(); pipelined != 1 {
		t.Errorf("pipelined %d stores, want 1 (the publish)", pipelined)
	}
	want := []string{loop.EntryStart, loop.EntryTools, loop.EntryModel, loop.EntryDispatched, loop.EntryPublished,
		loop.EntryObserved, loop.EntryModel, loop.EntryFinished}
	if got := j.Kinds(); !slices.Equal(got, want) {
		t.Errorf("journal %v, want %v", got, want)
	}
}
