package client_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/testsync"
	"github.com/toolfleet/toolfleet/pkg/client"
	"github.com/toolfleet/toolfleet/pkg/fleettest"
	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/model/scripted"
	"github.com/toolfleet/toolfleet/pkg/protocol"
	"github.com/toolfleet/toolfleet/pkg/runner"
	"github.com/toolfleet/toolfleet/pkg/tool"
	"github.com/toolfleet/toolfleet/pkg/worker"
)

type pairIn struct {
	A int `json:"a"`
	B int `json:"b"`
}

var (
	sumTool = tool.Must(tool.New(tool.Config{Name: "sum", Idempotent: true},
		func(_ context.Context, in pairIn) (int, error) { return in.A + in.B, nil }))
	mulTool = tool.Must(tool.New(tool.Config{Name: "mul", Idempotent: true},
		func(_ context.Context, in pairIn) (int, error) { return in.A * in.B, nil }))
)

// gatedRun starts, on fleet, a durable run whose model calls tool once
// (every call needs approval) and then answers its result, and returns its
// id and a channel that gets the run's result.
func gatedRun(t *testing.T, fleet *fleettest.Fleet, toolName string) (protocol.RunID, <-chan *loop.Result) {
	t.Helper()
	model, err := scripted.Parse(fmt.Appendf(nil, `{"turns": [
		{"tool_calls": [{"id": "c1", "name": %q, "arguments": {"a": 6, "b": 7}}]},
		{"content": "{{result \"c1\"}}"}]}`, toolName))
	if err != nil {
		t.Fatal(err)
	}
	r := fleet.Runner(runner.Config{Model: model, Loop: loop.Config{RequireApproval: []string{"*"}}})
	id := protocol.NewRunID()
	done := make(chan *loop.Result, 1)
	go func() {
		res, err := r.RunDurable(context.WithoutCancel(t.Context()), id, "go")
		if err != nil {
			t.Errorf("run %s: %v", id, err)
		}
		done <- res
	}()
	return id, done
}

// requestSeq waits until the approvals stream holds run's request and
// returns its sequence.
func requestSeq(t *testing.T, approvals jetstream.Stream, run protocol.RunID) uint64 {
	t.Helper()
	var seq uint64
	testsync.WaitFor(t, time.Minute, func() error {
		m, err := approvals.GetLastMsgForSubject(t.Context(), "fleet.approval.request."+string(run)+".*")
		if err != nil {
			return fmt.Errorf("run %s's request: %w", run, err)
		}
		seq = m.Sequence
		return nil
	})
	return seq
}

// watched waits until a watch's consumer on the approvals stream (one
// reading requests, not named in except) has been delivered every message
// up to seq.
func watched(t *testing.T, approvals jetstream.Stream, seq uint64, except ...string) {
	t.Helper()
	testsync.WaitFor(t, time.Minute, func() error {
		for info := range approvals.ListConsumers(t.Context()).Info() {
			if slices.Contains(info.Config.FilterSubjects, "fleet.approval.request.>") && !slices.Contains(except, info.Name) &&
				info.Delivered.Stream >= seq {
				return nil
			}
		}
		return fmt.Errorf("no watch of the requests has read up to seq %d", seq)
	})
}

// consumers names the approvals stream's consumers.
func consumers(t *testing.T, approvals jetstream.Stream) []string {
	t.Helper()
	var names []string
	for name := range approvals.ListConsumers(t.Context()).Info() {
		names = append(names, name.Name)
	}
	return names
}

// TestWaitApprovalReturnsWhenStored: a wait started before any request
// exists does not return for a request it does not select (another tool's,
// stored and read by its consumer first) and returns the one it selects,
// as stored (its stream sequence, its run, tool and arguments), once it
// is stored. Approved, the call runs and the run ends with its result.
func TestWaitApprovalReturnsWhenStored(t *testing.T) {
	fleet := fleettest.Start(t, fleettest.Config{Tools: []harness.Tool{sumTool, mulTool}})
	op, err := client.New(fleet.ConnectOperator(), client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(fleet.Conn())
	if err != nil {
		t.Fatal(err)
	}
	approvals, err := js.Stream(t.Context(), "FLEET_APPROVALS")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	type waited struct {
		req client.ApprovalRequest
		err error
	}
	done := make(chan waited, 1)
	go func() {
		req, err := op.WaitApproval(ctx, client.ApprovalFilter{Tool: "sum"})
		done <- waited{req, err}
	}()
	watched(t, approvals, 0)

	mulRun, mulDone := gatedRun(t, fleet, "mul")
	watched(t, approvals, requestSeq(t, approvals, mulRun))
	select {
	case w := <-done:
		t.Fatalf("WaitApproval returned %+v, %v before a request of sum was stored", w.req, w.err)
	default:
	}

	sumRun, sumDone := gatedRun(t, fleet, "sum")
	w := <-done
	if w.err != nil {
		t.Fatalf("WaitApproval: %v", w.err)
	}
	seq := requestSeq(t, approvals, sumRun)
	if w.req.RunID != sumRun || w.req.Tool != "sum" || w.req.Sequence != seq || w.req.CallID != "c1" ||
		string(w.req.Arguments) != `{"a":6,"b":7}` || !w.req.Deadline.After(time.Now()) {
		t.Fatalf("WaitApproval = %+v, want run %s's request of sum, seq %d", w.req, sumRun, seq)
	}

	for req, run := range map[client.ApprovalFilter]<-chan *loop.Result{{Run: sumRun}: sumDone, {Run: mulRun}: mulDone} {
		pending, err := op.WaitApproval(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if outcome, err := op.Approve(ctx, pending, client.Decision{Approver: "test"}); err != nil || outcome != "approved" {
			t.Fatalf("Approve(%s) = %q, %v", pending.RunID, outcome, err)
		}
		if res := <-run; res == nil || res.Answer != "13" && res.Answer != "42" {
			t.Fatalf("run %s ended with %+v", pending.RunID, res)
		}
	}
}

// TestWatchApprovalsFiltersAndSettles: a watch started after requests are
// stored delivers the open ones its filter selects, in the order they
// were stored, and not one settled before it started; a run filter
// excludes the other run's; then it delivers a request stored later; ctx
// ending ends it with ctx's error.
func TestWatchApprovalsFiltersAndSettles(t *testing.T) {
	fleet := fleettest.Start(t, fleettest.Config{Tools: []harness.Tool{sumTool, mulTool}})
	op, err := client.New(fleet.ConnectOperator(), client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(fleet.Conn())
	if err != nil {
		t.Fatal(err)
	}
	approvals, err := js.Stream(t.Context(), "FLEET_APPROVALS")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	settled, settledDone := gatedRun(t, fleet, "mul")
	req, err := op.WaitApproval(ctx, client.ApprovalFilter{Run: settled})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := op.Deny(ctx, req, client.Decision{Approver: "test", Reason: "no"}); err != nil {
		t.Fatal(err)
	}
	if res := <-settledDone; res == nil || res.Calls[0].Outcome != protocol.OutcomeDenied {
		t.Fatalf("the denied run ended with %+v", res)
	}
	first, firstDone := gatedRun(t, fleet, "mul")
	requestSeq(t, approvals, first)
	other, otherDone := gatedRun(t, fleet, "sum")
	requestSeq(t, approvals, other)

	wctx, stop := context.WithCancel(ctx)
	defer stop()
	var got []protocol.RunID
	var last error
	var later protocol.RunID
	var laterDone <-chan *loop.Result
	for req, err := range op.WatchApprovals(wctx, client.ApprovalFilter{Tool: "mul"}) {
		if err != nil {
			last = err
			break
		}
		got = append(got, req.RunID)
		switch len(got) {
		case 1:
			// The open one stored before the watch; now one stored after.
			later, laterDone = gatedRun(t, fleet, "mul")
		case 2:
			stop()
		}
	}
	if len(got) != 2 || got[0] != first || got[1] != later {
		t.Fatalf("the watch delivered %v, want %s (open before) then %s (stored after); not %s (settled) nor %s (sum)", got, first, later, settled, other)
	}
	if !errors.Is(last, context.Canceled) {
		t.Fatalf("after its ctx was cancelled the watch yielded %v, want context.Canceled", last)
	}

	// A run filter: the other run's request only.
	req, err = op.WaitApproval(ctx, client.ApprovalFilter{Run: other})
	if err != nil || req.RunID != other || req.Tool != "sum" {
		t.Fatalf("WaitApproval(run %s) = %+v, %v", other, req, err)
	}
	for _, run := range []protocol.RunID{first, later, other} {
		req, err := op.WaitApproval(ctx, client.ApprovalFilter{Run: run})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := op.Deny(ctx, req, client.Decision{Approver: "test", Reason: "done"}); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []<-chan *loop.Result{firstDone, otherDone, laterDone} {
		<-d
	}
}

// TestWaitsEndWithTheirContext: a wait for an approval that nothing
// answers, and a run's watch that no entry comes to, end when their ctx
// does, with ctx's error; a filter that is not a token is refused before
// anything is read.
func TestWaitsEndWithTheirContext(t *testing.T) {
	fleet := fleettest.Start(t, fleettest.Config{})
	op, err := client.New(fleet.ConnectOperator(), client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := op.WaitApproval(ctx, client.ApprovalFilter{Tool: "sum"})
		done <- err
	}()
	js, err := jetstream.New(fleet.Conn())
	if err != nil {
		t.Fatal(err)
	}
	approvals, err := js.Stream(t.Context(), "FLEET_APPROVALS")
	if err != nil {
		t.Fatal(err)
	}
	watched(t, approvals, 0)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("WaitApproval after cancel = %v, want context.Canceled", err)
	}

	// A run's watch, on a run with no journal yet.
	journal, err := js.Stream(t.Context(), "FLEET_JOURNAL")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel = context.WithCancel(t.Context())
	go func() {
		for ev, err := range op.WatchRun(ctx, "not-yet") {
			if err == nil {
				err = fmt.Errorf("event %+v", ev)
			}
			done <- err
		}
	}()
	testsync.WaitFor(t, time.Minute, func() error {
		for info := range journal.ListConsumers(t.Context()).Info() {
			if info.Config.FilterSubject == "fleet.journal.run.not-yet" || slices.Contains(info.Config.FilterSubjects, "fleet.journal.run.not-yet") {
				return nil
			}
		}
		return errors.New("no watch of the run's journal")
	})
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("WatchRun after cancel = %v, want context.Canceled", err)
	}

	for _, f := range []client.ApprovalFilter{{Run: "a.b"}, {Tool: "x>"}, {Agent: "a b"}, {Since: -time.Second}} {
		if _, err := op.WaitApproval(t.Context(), f); err == nil {
			t.Errorf("WaitApproval(%+v) = nil error, want the filter refused", f)
		}
	}
}

// TestWaitApprovalByAgent: on a serving fleet, a run submitted to an
// agent is selected by that agent's name (read from the run's journal)
// and not by another's; approved through the wait, the run's result gives
// the call's outcome and observation by its tool_call_id.
func TestWaitApprovalByAgent(t *testing.T) {
	fleet, stop := serveFleet(`{"turns": [
	  {"tool_calls": [{"id": "c1", "name": "calculator", "arguments": {"expression": "6 * 7"}}]},
	  {"content": "{{result \"c1\"}}"}]}`, "calculator")
	defer stop()
	c, err := client.New(fleet.Conn(), client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	run, err := c.Submit(ctx, client.Request{Prompt: "6 * 7?"})
	if err != nil {
		t.Fatal(err)
	}
	req, err := c.WaitApproval(ctx, client.ApprovalFilter{Agent: protocol.DefaultAgent})
	if err != nil || req.RunID != run.ID || req.Tool != "calculator" {
		t.Fatalf("WaitApproval(agent default) = %+v, %v; want run %s's request", req, err, run.ID)
	}

	js, err := jetstream.New(fleet.Conn())
	if err != nil {
		t.Fatal(err)
	}
	approvals, err := js.Stream(ctx, "FLEET_APPROVALS")
	if err != nil {
		t.Fatal(err)
	}
	before := consumers(t, approvals)
	octx, ocancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		req, err := c.WaitApproval(octx, client.ApprovalFilter{Agent: "helper"})
		if err == nil {
			err = fmt.Errorf("returned %+v", req)
		}
		done <- err
	}()
	watched(t, approvals, req.Sequence, before...)
	ocancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("WaitApproval(agent helper) = %v, want nothing until its ctx ended", err)
	}

	if outcome, err := c.Approve(ctx, req, client.Decision{Approver: "test"}); err != nil || outcome != "approved" {
		t.Fatalf("Approve = %q, %v", outcome, err)
	}
	res, err := c.Wait(ctx, run)
	if err != nil {
		t.Fatal(err)
	}
	lr, err := client.LoopResult(res)
	if err != nil {
		t.Fatal(err)
	}
	if call, ok := lr.Call("c1"); !ok || call.Outcome != protocol.OutcomeOK || call.Observation != "42" || call.Worker == "" {
		t.Fatalf("Call(c1) = %+v, %v; want ok, 42, with its worker", call, ok)
	}
}

// TestWatchRunEvents: a served run's events come as they happen — the
// progress a tool reports while it runs (the tool goes on only once the
// watch has delivered one), the round's answered calls with their
// outcome, observation and worker, and the run's end — and the iteration
// ends after the end; a watch started after the run ended gives the same
// answered calls and end from the journal.
func TestWatchRunEvents(t *testing.T) {
	fleet, stop := serveFleet(`{"turns": [
	  {"tool_calls": [{"id": "c1", "name": "slow", "arguments": {}}]},
	  {"content": "{{result \"c1\"}}"}]}`)
	defer stop()
	release := make(chan struct{})
	slow := tool.Must(tool.New(tool.Config{Name: "slow", Idempotent: true}, func(ctx context.Context, _ struct{}) (string, error) {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			harness.ReportProgress(ctx, "working")
			select {
			case <-release:
				return "done", nil
			case <-ctx.Done():
				return "", ctx.Err()
			case <-tick.C:
			}
		}
	}))
	w, err := worker.New(fleet.Conn(), worker.Config{Tools: []harness.Tool{slow}, Name: "slow-worker"})
	if err != nil {
		t.Fatal(err)
	}
	wctx, wstop := context.WithCancel(t.Context())
	wdone := make(chan error, 1)
	go func() { wdone <- w.Run(wctx) }()
	defer func() { wstop(); <-wdone }()
	<-w.Published()

	c, err := client.New(fleet.Conn(), client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	run, err := c.Submit(ctx, client.Request{Prompt: "go"})
	if err != nil {
		t.Fatal(err)
	}
	var kinds []client.RunEventKind
	var answered, finished client.RunEvent
	for ev, err := range c.WatchRun(ctx, run.ID) {
		if err != nil {
			t.Fatalf("WatchRun: %v (after %v)", err, kinds)
		}
		// A report passed on just before the call's answer may arrive
		// after the journal's entry: the order of two subjects is not
		// kept.
		if (len(kinds) == 0 || kinds[len(kinds)-1] != ev.Kind) && (ev.Kind != client.RunProgress || answered.Kind == "") {
			kinds = append(kinds, ev.Kind)
		}
		switch ev.Kind {
		case client.RunProgress:
			if ev.Progress.Message != "working" || ev.Progress.Tool != "slow" {
				t.Fatalf("progress %+v", ev.Progress)
			}
			select {
			case <-release:
			default:
				close(release)
			}
		case client.RunAnswered:
			answered = ev
		case client.RunFinished:
			finished = ev
		}
	}
	if !slices.Equal(kinds, []client.RunEventKind{client.RunProgress, client.RunAnswered, client.RunFinished}) {
		t.Fatalf("events %v, want progress, answered, finished", kinds)
	}
	want := client.CallAnswer{Tool: "slow", Outcome: protocol.OutcomeOK, Observation: "done", Worker: "slow-worker"}
	if len(answered.Calls) != 1 || answered.Round != 1 {
		t.Fatalf("answered %+v, want round 1's one call", answered)
	}
	got := answered.Calls[0]
	got.CallKey, got.Duration = "", 0
	if got != want {
		t.Fatalf("answered %+v, want %+v", got, want)
	}
	if finished.Termination != loop.TerminationNatural || finished.Answer != "done" {
		t.Fatalf("finished %+v", finished)
	}

	var again []client.RunEvent
	for ev, err := range c.WatchRun(ctx, run.ID) {
		if err != nil {
			t.Fatal(err)
		}
		again = append(again, ev)
	}
	if len(again) != 2 || again[0].Kind != client.RunAnswered || again[0].Calls[0] != answered.Calls[0] ||
		again[1].Kind != client.RunFinished || again[1].Answer != "done" {
		t.Fatalf("after the end: %+v, want the answered calls and the end", again)
	}
}
