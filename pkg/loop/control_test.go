package loop_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/loop/looptest"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// instructedModel answers by the transcript's tool messages and its
// instructions: round 1 calls echo "one" and add 1+2, round 2 echo "two"
// (echo "careful" when the system message says "careful"), round 3
// answers. It counts its calls.
func instructedModel(asked *atomic.Int64) *looptest.Model {
	return looptest.ModelFunc(func(req loop.Request) (*loop.Response, error) {
		asked.Add(1)
		tools, careful := 0, false
		for _, m := range req.Messages {
			switch m.Role {
			case "tool":
				tools++
			case "system":
				careful = careful || strings.Contains(m.Content, "careful")
			}
		}
		switch tools {
		case 0:
			return &loop.Response{Message: loop.Message{Role: "assistant", ToolCalls: []loop.ToolCall{
				looptest.Call("c1", "echo", `{"text":"one"}`), looptest.Call("c2", "add", `{"b":2, "a":1}`),
			}}}, nil
		case 2:
			text := "two"
			if careful {
				text = "careful"
			}
			return &loop.Response{Message: loop.Message{Role: "assistant", ToolCalls: []loop.ToolCall{
				looptest.Call("c3", "echo", `{"text":"`+text+`"}`),
			}}}, nil
		default:
			return &loop.Response{Message: loop.Message{Role: "assistant", Content: "done"}}, nil
		}
	})
}

// recordedRun runs the instructed model as a durable run whose echo is
// not idempotent and returns its journal, its result and the dispatcher
// that ran its calls.
func recordedRun(t *testing.T, executed *atomic.Int64) ([]loop.JournalEntry, *loop.Result, *looptest.Dispatcher) {
	t.Helper()
	disp := looptest.New(func(ctx context.Context, c protocol.Call) (protocol.Result, bool) {
		executed.Add(1)
		return handler(ctx, c)
	})
	var asked atomic.Int64
	j := looptest.NewJournal()
	r, err := loop.New(fastConfig(), instructedModel(&asked), looptest.NewCatalog(controlSpecs()...), disp, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.RunDurable(t.Context(), loop.Durable{RunID: "recorded-1", Journal: j,
		Messages: []loop.Message{{Role: "system", Content: "be quick"}, {Role: "user", Content: "go"}}})
	disp.Wait()
	if err != nil || res.TerminationReason != loop.TerminationNatural || executed.Load() != 3 {
		t.Fatalf("recorded run: %v, %s, %d calls ran, want natural and 3", err, res.TerminationReason, executed.Load())
	}
	return j.Resume(-1).Entries(), res, disp
}

// controlSpecs is the usual catalog with echo not idempotent and add
// idempotent and read-only.
func controlSpecs() []protocol.ToolSpec {
	out := specs()
	for i := range out {
		if out[i].Name == "add" {
			out[i].Idempotent, out[i].ReadOnly = true, true
		}
	}
	return out
}

// TestReplayUnchanged: a replay with the same model and instructions
// answers every call from the journal, runs none, and does not diverge.
func TestReplayUnchanged(t *testing.T) {
	var executed, asked atomic.Int64
	entries, want, disp := recordedRun(t, &executed)
	published := len(disp.Published())
	rep, err := loop.Replay(t.Context(), fastConfig(), instructedModel(&asked), loop.ReplayInput{Entries: entries})
	if err != nil {
		t.Fatalf("Replay: %v", err)
	}
	checkInvariants(t, rep.Result)
	if rep.Diverged || rep.FirstDivergingRound != 0 || len(rep.Rounds) != 0 {
		t.Fatalf("report %+v, want no divergence", rep)
	}
	if rep.ReplayedCalls != 3 || rep.NotReplayedCalls != 0 {
		t.Fatalf("replayed %d, not replayed %d, want 3 and 0", rep.ReplayedCalls, rep.NotReplayedCalls)
	}
	if executed.Load() != 3 || len(disp.Published()) != published {
		t.Fatalf("after the replay %d executions and %d publishes, want 3 and %d", executed.Load(), len(disp.Published()), published)
	}
	if rep.Result.Answer != want.Answer || asked.Load() != 3 {
		t.Fatalf("replay answered %q after %d model calls, want %q after 3", rep.Result.Answer, asked.Load(), want.Answer)
	}
	for i, m := range rep.Result.Messages {
		if m.Role == "tool" && m.Content != want.Messages[i].Content {
			t.Fatalf("message %d: %q, want the recorded %q", i, m.Content, want.Messages[i].Content)
		}
	}
}

// TestReplayChangedInstructions: new instructions change round 2's call:
// the report names round 2 and the changed call (keys and digest, never a
// value), the new call is answered not_replayed and nothing runs.
func TestReplayChangedInstructions(t *testing.T) {
	var executed, asked atomic.Int64
	entries, _, _ := recordedRun(t, &executed)
	rep, err := loop.Replay(t.Context(), fastConfig(), instructedModel(&asked), loop.ReplayInput{Entries: entries, Instructions: "be careful"})
	if err != nil {
		t.Fatalf("Replay: %v", err)
	}
	checkInvariants(t, rep.Result)
	if !rep.Diverged || rep.FirstDivergingRound != 2 || len(rep.Rounds) != 1 {
		t.Fatalf("report %+v, want a divergence in round 2 only", rep)
	}
	d := rep.Rounds[0]
	if len(d.Changed) != 1 || len(d.Added) != 0 || len(d.Dropped) != 0 || d.AnswerChanged {
		t.Fatalf("round 2: %+v, want one changed call", d)
	}
	ch := d.Changed[0]
	if ch.From.Tool != "echo" || ch.To.Tool != "echo" || ch.From.Digest == ch.To.Digest || strings.Join(ch.To.ArgKeys, ",") != "text" {
		t.Fatalf("changed call %+v, want echo with other arguments under the key text", ch)
	}
	if rep.ReplayedCalls != 2 || rep.NotReplayedCalls != 1 || rep.Result.Metadata.Outcomes[protocol.OutcomeNotReplayed] != 1 {
		t.Fatalf("replayed %d, not replayed %d, outcomes %v: want 2, 1", rep.ReplayedCalls, rep.NotReplayedCalls, rep.Result.Metadata.Outcomes)
	}
	if executed.Load() != 3 {
		t.Fatalf("%d executions after the replay, want the recorded 3", executed.Load())
	}
}

// TestReplayNeedsAnEndedRun: a journal without the run's end, or without
// its input, is refused.
func TestReplayNeedsAnEndedRun(t *testing.T) {
	var executed, asked atomic.Int64
	entries, _, _ := recordedRun(t, &executed)
	cut := entries[:len(entries)-1]
	if _, err := loop.Replay(t.Context(), fastConfig(), instructedModel(&asked), loop.ReplayInput{Entries: cut}); !errors.Is(err, loop.ErrRunNotEnded) {
		t.Fatalf("unended run: %v, want ErrRunNotEnded", err)
	}
	noInput := append([]loop.JournalEntry(nil), entries...)
	for i := range noInput {
		if noInput[i].Kind == loop.EntryStart {
			noInput[i].Data = nil
		}
	}
	if _, err := loop.Replay(t.Context(), fastConfig(), instructedModel(&asked), loop.ReplayInput{Entries: noInput}); !errors.Is(err, loop.ErrNoInput) {
		t.Fatalf("no input: %v, want ErrNoInput", err)
	}
	if _, err := loop.ForkMessages(t.Context(), noInput, 2); !errors.Is(err, loop.ErrNoInput) {
		t.Fatalf("fork without input: %v, want ErrNoInput", err)
	}
	if asked.Load() != 0 {
		t.Fatalf("the model was asked %d times, want 0", asked.Load())
	}
	// Given the input, a journal without one replays.
	rep, err := loop.Replay(t.Context(), fastConfig(), instructedModel(&asked), loop.ReplayInput{Entries: noInput,
		Messages: []loop.Message{{Role: "system", Content: "be quick"}, {Role: "user", Content: "go"}}})
	if err != nil || rep.Diverged {
		t.Fatalf("replay given the input: %v, %+v; want no divergence", err, rep)
	}
}

// TestForkAtRound2: the fork's transcript holds round 1 as recorded; a run
// of it asks the model from round 2 on, runs only its own calls, and its
// side effects are its own.
func TestForkAtRound2(t *testing.T) {
	var executed, asked atomic.Int64
	entries, want, disp := recordedRun(t, &executed)
	msgs, err := loop.ForkMessages(t.Context(), entries, 2)
	if err != nil {
		t.Fatalf("ForkMessages: %v", err)
	}
	// system, user, round 1's assistant message and its two tool messages
	if len(msgs) != 5 || msgs[2].Role != "assistant" || len(msgs[2].ToolCalls) != 2 {
		t.Fatalf("fork transcript %+v, want the input and round 1", msgs)
	}
	for i := range msgs {
		if msgs[i].Content != want.Messages[i].Content || msgs[i].Role != want.Messages[i].Role {
			t.Fatalf("fork message %d %+v, want the recorded %+v", i, msgs[i], want.Messages[i])
		}
	}
	r, err := loop.New(fastConfig(), instructedModel(&asked), looptest.NewCatalog(controlSpecs()...), disp, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.RunMessages(t.Context(), msgs)
	disp.Wait()
	if err != nil {
		t.Fatal(err)
	}
	checkInvariants(t, res)
	if executed.Load() != 4 || asked.Load() != 2 {
		t.Fatalf("the fork ran %d calls and asked %d times, want 1 and 2", executed.Load()-3, asked.Load())
	}
	if len(res.SideEffects) != 1 || res.SideEffects[0].Tool != "echo" || res.SideEffects[0].Round != 1 {
		t.Fatalf("side effects %+v, want the fork's one echo", res.SideEffects)
	}
	if len(want.SideEffects) != 2 {
		t.Fatalf("recorded side effects %+v, want its two echo calls", want.SideEffects)
	}
	for _, at := range []int{0, 4} {
		if _, err := loop.ForkMessages(t.Context(), entries, at); !errors.Is(err, loop.ErrForkRound) {
			t.Fatalf("fork at %d: %v, want ErrForkRound", at, err)
		}
	}
}

// TestDryRun: a dry run asks the gate as usual, runs the read-only tool,
// answers the other simulated with its argument keys and digest but no
// value, and a resumed dry run stays one under a runner that is not.
func TestDryRun(t *testing.T) {
	var executed, asked atomic.Int64
	disp := looptest.New(func(ctx context.Context, c protocol.Call) (protocol.Result, bool) {
		executed.Add(1)
		return handler(ctx, c)
	})
	gate := looptest.AllowAll()
	cfg := fastConfig()
	cfg.DryRun, cfg.RequireApproval = true, []string{"echo"}
	j := looptest.NewJournal()
	r, err := loop.New(cfg, instructedModel(&asked), looptest.NewCatalog(controlSpecs()...), disp, gate)
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.RunDurable(t.Context(), loop.Durable{RunID: "dry-1", Journal: j, Prompt: "go"})
	disp.Wait()
	if err != nil {
		t.Fatal(err)
	}
	checkInvariants(t, res)
	if !res.DryRun || len(res.SideEffects) != 0 {
		t.Fatalf("dry_run %v, side effects %+v: want a dry run with none", res.DryRun, res.SideEffects)
	}
	if got := publishedTools(disp); strings.Join(got, ",") != "add" || executed.Load() != 1 {
		t.Fatalf("published %v, %d ran: want only the read-only add", got, executed.Load())
	}
	if n := len(gate.Requests()); n != 2 {
		t.Fatalf("the gate was asked %d times, want 2 (both echo calls)", n)
	}
	if got := res.Metadata.Outcomes[protocol.OutcomeSimulated]; got != 2 {
		t.Fatalf("outcomes %v, want 2 simulated", res.Metadata.Outcomes)
	}
	obs := toolMessages(res)["c1"]
	if !strings.Contains(obs, "{text}") || !strings.Contains(obs, "dry run") || strings.Contains(obs, "one") {
		t.Fatalf("simulated observation %q: want the key text and no value", obs)
	}
	// Resumed after its start by a runner not configured for a dry run:
	// the journaled policy keeps it one.
	disp2 := looptest.New(func(ctx context.Context, c protocol.Call) (protocol.Result, bool) {
		executed.Add(1)
		return handler(ctx, c)
	})
	plain, err := loop.New(fastConfig(), instructedModel(&asked), looptest.NewCatalog(controlSpecs()...), disp2, gate)
	if err != nil {
		t.Fatal(err)
	}
	before := executed.Load()
	res2, err := plain.RunDurable(t.Context(), loop.Durable{RunID: "dry-1", Journal: j.Resume(1), Prompt: "go"})
	disp2.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if !res2.DryRun || executed.Load()-before != 1 || res2.Metadata.Outcomes[protocol.OutcomeSimulated] != 2 {
		t.Fatalf("resumed: dry_run %v, %d ran, outcomes %v: want a dry run running only add", res2.DryRun, executed.Load()-before, res2.Metadata.Outcomes)
	}
}

// TestDryRunJournalRefusedByAnOlderReader: the start entry of a dry run
// journals dry_run in its policy, a field the journal reader of a
// coordinator older than run control does not know: its strict decoder
// refuses the journal rather than resume the dry run as a real one. A
// plain run's start entry (its input in Data, a field it knows) decodes.
func TestDryRunJournalRefusedByAnOlderReader(t *testing.T) {
	// The policy and start entry as the previous release decodes them.
	type olderPolicy struct {
		RequireApproval      []string    `json:"require_approval,omitempty"`
		ApprovalTimeoutMS    int64       `json:"approval_timeout_ms"`
		MaxRounds            int         `json:"max_rounds"`
		MaxToolCallsPerRound int         `json:"max_tool_calls_per_round"`
		MaxObservationChars  int         `json:"max_observation_chars"`
		ToolTimeoutMS        int64       `json:"tool_timeout_ms,omitempty"`
		MaxRunDurationMS     int64       `json:"max_run_duration_ms"`
		Budget               loop.Budget `json:"budget,omitzero"`
	}
	type olderStart struct {
		Kind   string          `json:"kind"`
		Secret string          `json:"secret,omitempty"`
		Policy *olderPolicy    `json:"policy,omitempty"`
		Data   json.RawMessage `json:"data,omitempty"`
	}
	for _, dry := range []bool{false, true} {
		cfg := fastConfig()
		cfg.DryRun = dry
		var asked atomic.Int64
		j := looptest.NewJournal()
		r, err := loop.New(cfg, instructedModel(&asked), looptest.NewCatalog(controlSpecs()...), looptest.New(handler), nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.RunDurable(t.Context(), loop.Durable{RunID: "older-1", Journal: j, Prompt: "go"}); err != nil {
			t.Fatal(err)
		}
		start := j.Resume(1).Entries()[0]
		data, err := json.Marshal(start)
		if err != nil {
			t.Fatal(err)
		}
		var old olderStart
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		err = dec.Decode(&old)
		if dry && (err == nil || !strings.Contains(err.Error(), "dry_run")) {
			t.Fatalf("a dry run's start entry decoded by the older reader: %v, want refused on dry_run", err)
		}
		if !dry && err != nil {
			t.Fatalf("a plain run's start entry refused by the older reader: %v", err)
		}
	}
}
