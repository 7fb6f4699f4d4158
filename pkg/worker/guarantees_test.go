package worker_test

// The worker-side guarantees of internal/natsbus's tests (claim, approval
// proof, deadline, expiry, redelivery), shown again through the public
// worker, as a Go program serving its tools gets them.

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/natsbus/dispatch"
	"github.com/toolfleet/toolfleet/internal/testsync"
	"github.com/toolfleet/toolfleet/pkg/fleettest"
	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
	"github.com/toolfleet/toolfleet/pkg/tool"
	"github.com/toolfleet/toolfleet/pkg/worker"
)

// caller publishes calls to a fleet as a coordinator does and reads their
// results.
type caller struct {
	fleet    *fleettest.Fleet
	js       jetstream.JetStream
	subjects protocol.Subjects
	d        *dispatch.Dispatcher
	run      protocol.RunID
	in       loop.Inbox
}

func newCaller(t *testing.T, fleet *fleettest.Fleet) *caller {
	t.Helper()
	js, err := jetstream.New(fleet.Conn())
	if err != nil {
		t.Fatal(err)
	}
	subjects, _ := protocol.NewSubjects(fleet.Prefix())
	d := dispatch.NewDispatcher(fleet.Conn(), js, subjects, dispatch.DispatcherConfig{})
	t.Cleanup(func() { d.Close() })
	run := protocol.NewRunID()
	in, err := d.Open(t.Context(), run)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close() })
	return &caller{fleet: fleet, js: js, subjects: subjects, d: d, run: run, in: in}
}

func (c *caller) call(tool protocol.ToolName, args string, d time.Duration) protocol.Call {
	return protocol.Call{V: protocol.Version, RunID: c.run, Round: 1, CallKey: protocol.NewCallKey(), CallID: "call_1",
		Tool: tool, Arguments: json.RawMessage(args), Deadline: time.Now().Add(d), Attempt: 1}
}

func (c *caller) publish(t *testing.T, ctx context.Context, call protocol.Call) {
	t.Helper()
	c.publishOutgoing(t, ctx, loop.Outgoing{Call: call})
}

func (c *caller) publishOutgoing(t *testing.T, ctx context.Context, o loop.Outgoing) {
	t.Helper()
	if err := c.d.Publish(ctx, o); err != nil {
		t.Fatalf("Publish: %v", err)
	}
}

// next reads the inbox until match holds for an event.
func (c *caller) next(t *testing.T, match func(loop.Event) bool) loop.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	for {
		select {
		case ev, ok := <-c.in.Events():
			if !ok {
				t.Fatal("inbox closed")
			}
			if match(ev) {
				return ev
			}
		case <-ctx.Done():
			t.Fatal("no matching event in 20s")
		}
	}
}

func (c *caller) result(t *testing.T, key protocol.CallKey) protocol.Result {
	t.Helper()
	return *c.next(t, func(ev loop.Event) bool { return ev.Result != nil && ev.Result.CallKey == key }).Result
}

func TestPublicWorkerClaimsANonIdempotentCallBeforeItRuns(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	charge := tool.Must(tool.New(tool.Config{Name: "charge"}, func(ctx context.Context, _ struct{}) (string, error) {
		close(started)
		select {
		case <-release:
			return "charged", nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}))
	fleet := fleettest.Start(t, fleettest.Config{Tools: []harness.Tool{charge}, Worker: worker.Config{AckWait: 30 * time.Second}})
	c := newCaller(t, fleet)
	call := c.call("charge", `{}`, 20*time.Second)
	c.publish(t, t.Context(), call)
	select {
	case <-started:
	case <-time.After(20 * time.Second):
		t.Fatal("tool did not start")
	}
	s, err := c.js.Stream(t.Context(), c.subjects.CallsStream())
	if err != nil {
		t.Fatal(err)
	}
	// Claimed before it runs: its start record stored, then its message
	// acknowledged (asynchronously).
	testsync.WaitFor(t, 10*time.Second, func() error {
		if si, err := s.Info(t.Context()); err != nil || si.State.Msgs != 0 {
			return fmt.Errorf("while the tool runs the calls stream holds %+v (%v), want no message (claimed before running)", si.State, err)
		}
		return nil
	})
	close(release)
	if r := c.result(t, call.CallKey); r.Outcome != protocol.OutcomeOK || r.Output != "charged" {
		t.Fatalf("result = %+v, want ok charged", r)
	}
}

func TestPublicWorkerChecksTheApprovalProof(t *testing.T) {
	var runs atomic.Int64
	deploy := tool.Must(tool.New(tool.Config{Name: "deploy", RequiresApproval: true}, func(context.Context, struct {
		Env string `json:"env"`
	}) (string, error) {
		runs.Add(1)
		return "deployed", nil
	}))
	fleet := fleettest.Start(t, fleettest.Config{Tools: []harness.Tool{deploy}})
	c := newCaller(t, fleet)

	forged := c.call("deploy", `{"env":"prod"}`, 20*time.Second)
	forged.Approval = &protocol.ApprovalProof{RequestSeq: 1, DecisionSeq: 2}
	for _, call := range []protocol.Call{c.call("deploy", `{"env":"prod"}`, 20*time.Second), forged} {
		c.publish(t, t.Context(), call)
		if r := c.result(t, call.CallKey); r.Outcome != protocol.OutcomeDenied {
			t.Fatalf("result = %+v, want denied without a valid proof", r)
		}
	}

	// A proof that holds: the request and the operator's approval stored.
	call := c.call("deploy", `{"env":"prod"}`, 20*time.Second)
	digest, err := protocol.Digest(call.RunID, call.CallKey, call.Tool, call.Arguments)
	if err != nil {
		t.Fatal(err)
	}
	reqSubj, _ := c.subjects.ApprovalRequest(call.RunID, call.CallKey)
	decSubj, _ := c.subjects.ApprovalDecision(call.RunID, call.CallKey)
	req, err := protocol.Encode(&protocol.ApprovalRequest{V: 1, RunID: call.RunID, CallKey: call.CallKey, Round: 1,
		Tool: call.Tool, Arguments: call.Arguments, Digest: digest, Deadline: time.Now().Add(time.Minute), DecisionSubject: decSubj})
	if err != nil {
		t.Fatal(err)
	}
	ra, err := c.js.Publish(t.Context(), reqSubj, req)
	if err != nil {
		t.Fatal(err)
	}
	// Only the operator may decide.
	ojs, err := jetstream.New(fleet.ConnectOperator())
	if err != nil {
		t.Fatal(err)
	}
	da, err := ojs.Publish(t.Context(), decSubj, []byte(`{"digest":"`+digest+`","approved":true,"approver":"alice"}`))
	if err != nil {
		t.Fatal(err)
	}
	call.Approval = &protocol.ApprovalProof{RequestSeq: ra.Sequence, DecisionSeq: da.Sequence}
	c.publish(t, t.Context(), call)
	if r := c.result(t, call.CallKey); r.Outcome != protocol.OutcomeOK || r.Output != "deployed" {
		t.Fatalf("result = %+v, want the approved call run", r)
	}
	if got := runs.Load(); got != 1 {
		t.Fatalf("the tool ran %d times, want 1 (only the approved call)", got)
	}
}

func TestPublicWorkerKeepsDeadlines(t *testing.T) {
	var runs atomic.Int64
	slow := tool.Must(tool.New(tool.Config{Name: "slow", Idempotent: true},
		func(ctx context.Context, _ struct{}) (string, error) {
			runs.Add(1)
			<-ctx.Done()
			return "", ctx.Err()
		}))
	fleet := fleettest.Start(t, fleettest.Config{Tools: []harness.Tool{slow}})
	c := newCaller(t, fleet)

	// The call's deadline (which a coordinator sets from the tool's
	// timeout) ends the tool's context on the worker.
	call := c.call("slow", `{}`, 2*time.Second)
	c.publish(t, t.Context(), call)
	if r := c.result(t, call.CallKey); r.Outcome != protocol.OutcomeTimeout {
		t.Fatalf("result = %+v, want timeout at the call's deadline", r)
	}
	// A call whose deadline has passed is dropped unrun.
	expired := c.call("slow", `{}`, -time.Second)
	c.publish(t, t.Context(), expired)
	testsync.WaitFor(t, 20*time.Second, func() error {
		s, err := c.js.Stream(t.Context(), c.subjects.CallsStream())
		if err != nil {
			return err
		}
		if si, err := s.Info(t.Context()); err != nil || si.State.Msgs != 0 {
			return errAny("the expired call is still in the stream")
		}
		return nil
	})
	if got := runs.Load(); got != 1 {
		t.Fatalf("the tool ran %d times, want 1 (the expired call never runs)", got)
	}
}

type errAny string

func (e errAny) Error() string { return string(e) }

func TestPublicWorkerRedeliversADeadWorkersIdempotentCall(t *testing.T) {
	var runs atomic.Int64
	job := tool.Must(tool.New(tool.Config{Name: "job", Idempotent: true}, func(ctx context.Context, _ struct{}) (string, error) {
		if runs.Add(1) == 1 {
			<-ctx.Done()
			return "", ctx.Err()
		}
		return "done", nil
	}))
	fleet := fleettest.Start(t, fleettest.Config{})
	cfg := worker.Config{Tools: []harness.Tool{job}, AckWait: 300 * time.Millisecond, ShutdownGrace: 100 * time.Millisecond}
	start := func(name string) *nats.Conn {
		cfg.Name = name
		nc := fleet.Connect()
		w, err := worker.New(nc, cfg)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); w.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done })
		select {
		case <-w.Published():
		case <-done:
			t.Fatalf("worker %s stopped before it served", name)
		}
		return nc
	}
	doomed := start("doomed")
	c := newCaller(t, fleet)
	call := c.call("job", `{}`, 30*time.Second)
	c.publishOutgoing(t, t.Context(), loop.Outgoing{Call: call, StartedNotices: true})
	c.next(t, func(ev loop.Event) bool { return ev.Started != nil && ev.Started.CallKey == call.CallKey })
	doomed.Close() // the worker's process dies: no heartbeat, no result

	start("survivor")
	if r := c.result(t, call.CallKey); r.Outcome != protocol.OutcomeOK || r.Worker != "survivor" || r.Attempt != 2 {
		t.Fatalf("result = %+v, want ok from survivor on attempt 2", r)
	}
}
