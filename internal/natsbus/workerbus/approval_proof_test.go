package workerbus_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/internal/natsbus/bustest"
	"github.com/toolfleet/toolfleet/internal/natsbus/workerbus"
	"github.com/toolfleet/toolfleet/internal/natstest"
	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/harness/harnesstest"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// An attack: whoever may publish calls (a coordinator's credentials, a
// stream republish) sends a call that needs approval without one, with a
// proof pointing at messages of another call, or at a denial. The worker
// reads the approvals stream itself and never runs it; only a call whose
// proof holds runs.
func TestWorkerRunsApprovedCallsOnly(t *testing.T) {
	f := bustest.NewFleet(t)
	var runs atomic.Int64
	deploy := harness.Tool{
		Name: "deploy", Parameters: json.RawMessage(`{"type":"object"}`), RequiresApproval: true,
		Run: func(context.Context, json.RawMessage) (string, error) { runs.Add(1); return "deployed", nil },
	}
	h := harnesstest.New(t, harness.Config{}, deploy, harness.Echo())
	w, _ := f.StartWorker(t, h, workerbus.WorkerConfig{Name: "w1"})
	d, run, in := f.OpenRun(t)
	later := time.Now().Add(time.Minute)

	type tc struct {
		name     string
		call     func() protocol.Call
		wantCode string // "" means it runs
	}
	tests := []tc{
		{"no proof", func() protocol.Call { return bustest.NewCall(run, "deploy", `{"env":"prod"}`, 10*time.Second) }, "approval:missing"},
		{"flagged by the call, no proof", func() protocol.Call {
			c := bustest.NewCall(run, "echo", `{"text":"x"}`, 10*time.Second)
			c.RequiresApproval = true
			return c
		}, "approval:missing"},
		{"proof of another call", func() protocol.Call {
			other := bustest.NewCall(run, "deploy", `{"env":"dev"}`, 10*time.Second)
			r, ds := f.StoreApproval(t, other, later, "approve")
			c := bustest.NewCall(run, "deploy", `{"env":"prod"}`, 10*time.Second)
			c.Approval = &protocol.ApprovalProof{RequestSeq: r, DecisionSeq: ds[0]}
			return c
		}, "approval:request_mismatch"},
		{"approval of other arguments", func() protocol.Call {
			c := bustest.NewCall(run, "deploy", `{"env":"dev"}`, 10*time.Second)
			r, ds := f.StoreApproval(t, c, later, "approve")
			c.Arguments = json.RawMessage(`{"env":"prod"}`)
			c.Approval = &protocol.ApprovalProof{RequestSeq: r, DecisionSeq: ds[0]}
			return c
		}, "approval:request_mismatch"},
		{"junk decision named as the proof", func() protocol.Call {
			c := bustest.NewCall(run, "deploy", `{"env":"prod"}`, 10*time.Second)
			r, ds := f.StoreApproval(t, c, later, `{"digest":"sha256:forged","approved":true}`)
			c.Approval = &protocol.ApprovalProof{RequestSeq: r, DecisionSeq: ds[0]}
			return c
		}, "approval:decision_not_found"},
		{"approval after a denial", func() protocol.Call {
			c := bustest.NewCall(run, "deploy", `{"env":"prod"}`, 10*time.Second)
			r, ds := f.StoreApproval(t, c, later, "deny", "approve")
			c.Approval = &protocol.ApprovalProof{RequestSeq: r, DecisionSeq: ds[1]}
			return c
		}, "approval:not_approved"},
		{"approval after the request's deadline", func() protocol.Call {
			c := bustest.NewCall(run, "deploy", `{"env":"prod"}`, 10*time.Second)
			r, ds := f.StoreApproval(t, c, time.Now().Add(-time.Second), "approve")
			c.Approval = &protocol.ApprovalProof{RequestSeq: r, DecisionSeq: ds[0]}
			return c
		}, "approval:late"},
		{"approved", func() protocol.Call {
			c := bustest.NewCall(run, "deploy", `{"env":"prod"}`, 10*time.Second)
			r, ds := f.StoreApproval(t, c, later, `{"digest":"sha256:junk","approved":true}`, "approve", "deny")
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
				f.Republish(t, call)
				// Its answer is not stored: the call key has its result.
				refused++
				natstest.WaitFor(t, 10*time.Second, func() error {
					if got := bustest.Events(t, w).Count(workerbus.CallTerminated, workerbus.TerminatedUnapproved); got != refused {
						return fmt.Errorf("unapproved terminations=%d, want %d", got, refused)
					}
					return nil
				})
				if runs.Load() != before || !f.Log.Contains(`"code":"replayed"`) {
					t.Fatalf("the replayed approved call ran again, or was not refused as replayed")
				}
				return
			}
			if err := d.Publish(bustest.Ctx(t), loop.Outgoing{Call: call}); err != nil {
				t.Fatalf("Publish: %v", err)
			}
			r := bustest.NextResult(t, in, call.CallKey, 10*time.Second)
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
			if got := bustest.Events(t, w).Count(workerbus.CallTerminated, workerbus.TerminatedUnapproved); got != refused {
				t.Errorf("unapproved terminations=%d, want %d", got, refused)
			}
			if !f.Log.Contains("refused a call that needs approval") {
				t.Errorf("no warning logged; logs:\n%s", f.Log.String())
			}
		})
	}
	f.WaitIdle(t, "deploy")
}
