package natsbus_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natstest"
	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/harness/harnesstest"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// storeApproval publishes, as a coordinator and an operator would, a
// request for call (with the given deadline) and then the decisions into
// the approvals stream, and returns their sequences.
func (f *fleet) storeApproval(t *testing.T, call protocol.Call, reqDeadline time.Time, decisions ...string) (reqSeq uint64, decSeqs []uint64) {
	t.Helper()
	digest, err := protocol.Digest(call.RunID, call.CallKey, call.Tool, call.Arguments)
	if err != nil {
		t.Fatal(err)
	}
	reqSubj, _ := f.subjects.ApprovalRequest(call.RunID, call.CallKey)
	decSubj, _ := f.subjects.ApprovalDecision(call.RunID, call.CallKey)
	data, err := protocol.Encode(&protocol.ApprovalRequest{
		V: 1, RunID: call.RunID, CallKey: call.CallKey, Round: 1, Tool: call.Tool, Arguments: call.Arguments,
		Digest: digest, Deadline: reqDeadline, DecisionSubject: decSubj,
	})
	if err != nil {
		t.Fatal(err)
	}
	ack, err := f.js.Publish(ctx(t), reqSubj, data)
	if err != nil {
		t.Fatalf("publishing the request: %v", err)
	}
	for _, d := range decisions {
		if d == "approve" || d == "deny" {
			d = `{"digest":"` + digest + `","approved":` + map[string]string{"approve": "true", "deny": "false"}[d] + `,"approver":"alice"}`
		}
		a, err := f.js.Publish(ctx(t), decSubj, []byte(d))
		if err != nil {
			t.Fatalf("publishing a decision: %v", err)
		}
		decSeqs = append(decSeqs, a.Sequence)
	}
	return ack.Sequence, decSeqs
}

// republish stores call on its tool's subject as the dispatcher does, but
// with a fresh message id, as a copy published past the dedup window would
// be.
func (f *fleet) republish(t *testing.T, call protocol.Call) {
	t.Helper()
	subject, _ := f.subjects.Call(call.Tool, protocol.ClassInteractive, protocol.DefaultClient)
	replyTo, _ := f.subjects.Result(call.RunID, call.Tool)
	data, err := protocol.Encode(&call)
	if err != nil {
		t.Fatal(err)
	}
	msg := nats.NewMsg(subject)
	msg.Data = data
	msg.Header.Set(protocol.HeaderMsgID, "replay-"+protocol.NewID())
	msg.Header.Set(protocol.HeaderReplyTo, replyTo)
	msg.Header.Set(protocol.HeaderDeadline, call.CallDeadline().Header())
	if _, err := f.js.PublishMsg(ctx(t), msg); err != nil {
		t.Fatal(err)
	}
}

// An attack: whoever may publish calls (a coordinator's credentials, a
// stream republish) sends a call that needs approval without one, with a
// proof pointing at messages of another call, or at a denial. The worker
// reads the approvals stream itself and never runs it; only a call whose
// proof holds runs.
func TestWorkerRunsApprovedCallsOnly(t *testing.T) {
	f := newFleet(t)
	var runs atomic.Int64
	deploy := harness.Tool{
		Name: "deploy", Parameters: json.RawMessage(`{"type":"object"}`), RequiresApproval: true,
		Run: func(context.Context, json.RawMessage) (string, error) { runs.Add(1); return "deployed", nil },
	}
	h := harnesstest.New(t, harness.Config{}, deploy, harness.Echo())
	w, _ := f.startWorker(t, h, natsbus.WorkerConfig{Name: "w1"})
	d, run, in := f.openRun(t)
	later := time.Now().Add(time.Minute)

	type tc struct {
		name     string
		call     func() protocol.Call
		wantCode string // "" means it runs
	}
	tests := []tc{
		{"no proof", func() protocol.Call { return newCall(run, "deploy", `{"env":"prod"}`, 10*time.Second) }, "approval:missing"},
		{"flagged by the call, no proof", func() protocol.Call {
			c := newCall(run, "echo", `{"text":"x"}`, 10*time.Second)
			c.RequiresApproval = true
			return c
		}, "approval:missing"},
		{"proof of another call", func() protocol.Call {
			other := newCall(run, "deploy", `{"env":"dev"}`, 10*time.Second)
			r, ds := f.storeApproval(t, other, later, "approve")
			c := newCall(run, "deploy", `{"env":"prod"}`, 10*time.Second)
			c.Approval = &protocol.ApprovalProof{RequestSeq: r, DecisionSeq: ds[0]}
			return c
		}, "approval:request_mismatch"},
		{"approval of other arguments", func() protocol.Call {
			c := newCall(run, "deploy", `{"env":"dev"}`, 10*time.Second)
			r, ds := f.storeApproval(t, c, later, "approve")
			c.Arguments = json.RawMessage(`{"env":"prod"}`)
			c.Approval = &protocol.ApprovalProof{RequestSeq: r, DecisionSeq: ds[0]}
			return c
		}, "approval:request_mismatch"},
		{"junk decision named as the proof", func() protocol.Call {
			c := newCall(run, "deploy", `{"env":"prod"}`, 10*time.Second)
			r, ds := f.storeApproval(t, c, later, `{"digest":"sha256:forged","approved":true}`)
			c.Approval = &protocol.ApprovalProof{RequestSeq: r, DecisionSeq: ds[0]}
			return c
		}, "approval:decision_not_found"},
		{"approval after a denial", func() protocol.Call {
			c := newCall(run, "deploy", `{"env":"prod"}`, 10*time.Second)
			r, ds := f.storeApproval(t, c, later, "deny", "approve")
			c.Approval = &protocol.ApprovalProof{RequestSeq: r, DecisionSeq: ds[1]}
			return c
		}, "approval:not_approved"},
		{"approval after the request's deadline", func() protocol.Call {
			c := newCall(run, "deploy", `{"env":"prod"}`, 10*time.Second)
			r, ds := f.storeApproval(t, c, time.Now().Add(-time.Second), "approve")
			c.Approval = &protocol.ApprovalProof{RequestSeq: r, DecisionSeq: ds[0]}
			return c
		}, "approval:late"},
		{"approved", func() protocol.Call {
			c := newCall(run, "deploy", `{"env":"prod"}`, 10*time.Second)
			r, ds := f.storeApproval(t, c, later, `{"digest":"sha256:junk","approved":true}`, "approve", "deny")
			c.Approval = &protocol.ApprovalProof{RequestSeq: r, DecisionSeq: ds[1]}
			return c
		}, ""},
	}
	// The approved call republished (a new message, past any dedup): this
	// worker ran it already.
	var approved protocol.Call
	tests = append(tests, tc{"the approved call again", func() protocol.Call {
		c := approved
		c.Attempt = 2
		return c
	}, "approval:replayed"})
	refused := int64(0)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := runs.Load()
			call := tt.call()
			if tt.name == "approved" {
				approved = call
			}
			if tt.wantCode == "approval:replayed" {
				// Republished as if past the dedup window: another message id.
				f.republish(t, call)
				// Its answer is not stored: the call key has its result.
				refused++
				natstest.WaitFor(t, 10*time.Second, func() error {
					if got := events(t, w).count(natsbus.CallTerminated, natsbus.TerminatedUnapproved); got != refused {
						return fmt.Errorf("unapproved terminations=%d, want %d", got, refused)
					}
					return nil
				})
				if runs.Load() != before || !f.log.Contains(`"code":"replayed"`) {
					t.Fatalf("the replayed approved call ran again, or was not refused as replayed")
				}
				return
			}
			if err := d.Publish(ctx(t), loop.Outgoing{Call: call}); err != nil {
				t.Fatalf("Publish: %v", err)
			}
			r := nextResult(t, in, call.CallKey, 10*time.Second)
			if tt.wantCode == "" {
				if r.Outcome != protocol.OutcomeOK || r.Output != "deployed" || runs.Load() != before+1 {
					t.Fatalf("result %+v, runs %d→%d: want the approved call run once", r, before, runs.Load())
				}
				return
			}
			refused++
			if r.Outcome != protocol.OutcomeDenied || r.ErrorType != tt.wantCode || r.Output != "" {
				t.Fatalf("result %+v, want denied with error type %s", r, tt.wantCode)
			}
			if runs.Load() != before {
				t.Fatalf("the tool ran without a valid approval")
			}
			if got := events(t, w).count(natsbus.CallTerminated, natsbus.TerminatedUnapproved); got != refused {
				t.Errorf("unapproved terminations=%d, want %d", got, refused)
			}
			if !f.log.Contains("refused a call that needs approval") {
				t.Errorf("no warning logged; logs:\n%s", f.log.String())
			}
		})
	}
	f.waitIdle(t, "deploy")
}
