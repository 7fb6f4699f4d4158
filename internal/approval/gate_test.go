package approval

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/testsync"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

const canary = "canary-7f3a-secret"

func TestGateDecisions(t *testing.T) {
	tests := []struct {
		name     string
		decision protocol.ApprovalDecision
		want     loop.Decision
		note     string
	}{
		{
			name:     "approved",
			decision: protocol.ApprovalDecision{Approved: ptr(true), Approver: "alice"},
			want:     loop.Decision{Approved: true, Approver: "alice"},
			note:     protocol.NoteApproved,
		},
		{
			name:     "denied with reason",
			decision: protocol.ApprovalDecision{V: 1, Approved: ptr(false), Reason: "not on a Friday", Approver: "bob"},
			want:     loop.Decision{Reason: "not on a Friday", Approver: "bob"},
			note:     protocol.NoteDenied,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, GateConfig{})
			requests := f.watch(t)
			req := newRequest(t, "run1", "deploy", `{"env":"prod","token":"`+canary+`"}`, 5*time.Second)
			res := f.approveAsync(t.Context(), req)

			got := recv(t, requests, 5*time.Second)
			if got.DecisionSubject != "fleet.approval.decision.run1."+string(req.CallKey) {
				t.Errorf("DecisionSubject=%q, want the decision subject of the call", got.DecisionSubject)
			}
			if got.Digest != digestOf(t, req) {
				t.Errorf("Digest=%q, want %q", got.Digest, digestOf(t, req))
			}
			if string(got.Arguments) != string(req.Arguments) {
				t.Errorf("Arguments=%s, want %s", got.Arguments, req.Arguments)
			}
			tt.decision.Digest = got.Digest
			f.decide(t, got, tt.decision)

			r := recv(t, res, 5*time.Second)
			if r.err != nil {
				t.Fatalf("Approve: %v", r.err)
			}
			if sansProof(t, r.d) != tt.want {
				t.Errorf("Decision=%+v, want %+v", r.d, tt.want)
			}
			n := lastNote(t, f, req)
			if n.Outcome != tt.note || n.Digest != got.Digest || n.Approver != tt.want.Approver {
				t.Errorf("note=%+v, want outcome %q by %q", n, tt.note, tt.want.Approver)
			}
			if strings.Contains(f.logs.String(), canary) {
				t.Errorf("logs carry an argument value: %s", f.logs.String())
			}
		})
	}
}

func TestGateExpiresAtDeadline(t *testing.T) {
	f := newFixture(t, GateConfig{})
	req := newRequest(t, "run1", "deploy", `{}`, 200*time.Millisecond)
	r := recv(t, f.approveAsync(t.Context(), req), 5*time.Second)
	if r.err != nil {
		t.Fatalf("Approve: %v", r.err)
	}
	if r.d != (loop.Decision{Expired: true}) {
		t.Errorf("Decision=%+v, want Expired only", r.d)
	}
	if r.elapsed < 150*time.Millisecond || r.elapsed > 2*time.Second {
		t.Errorf("returned after %v, want about 200ms", r.elapsed)
	}
	if n := lastNote(t, f, req); n.Outcome != protocol.NoteExpired || n.Approver != "" {
		t.Errorf("note=%+v, want expired with no approver", n)
	}
}

func TestGateDeadlineAlreadyPassed(t *testing.T) {
	f := newFixture(t, GateConfig{})
	req := newRequest(t, "run1", "deploy", `{}`, -time.Second)
	d, err := f.gate.Approve(t.Context(), req)
	if err != nil || d != (loop.Decision{Expired: true}) {
		t.Fatalf("Approve=%+v, %v; want Expired", d, err)
	}
	if _, err := f.stream.GetLastMsgForSubject(t.Context(), "fleet.approval.request.run1."+string(req.CallKey)); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Errorf("a request past its deadline was published (err=%v)", err)
	}
}

func TestGateIgnoresInvalidDecisions(t *testing.T) {
	type step struct {
		raw  []byte // published as is when set
		dec  func(req protocol.ApprovalRequest) protocol.ApprovalDecision
		code string // reason code logged for an ignored decision
	}
	otherCall := func(req protocol.ApprovalRequest) protocol.ApprovalDecision {
		other := req
		other.CallKey = protocol.NewCallKey()
		return protocol.ApprovalDecision{Digest: digestOf(t, other), Approved: ptr(true)}
	}
	otherArgs := func(req protocol.ApprovalRequest) protocol.ApprovalDecision {
		other := req
		other.Arguments = json.RawMessage(`{"env":"staging"}`)
		return protocol.ApprovalDecision{Digest: digestOf(t, other), Approved: ptr(true)}
	}
	valid := func(req protocol.ApprovalRequest) protocol.ApprovalDecision {
		return protocol.ApprovalDecision{Digest: req.Digest, Approved: ptr(true), Approver: "alice"}
	}
	tests := []struct {
		name  string
		steps []step
		want  loop.Decision
	}{
		{
			name: "malformed then valid",
			steps: []step{
				{raw: []byte(`approve ` + canary), code: ignoreMalformed},
				{raw: []byte(`{"digest":"x","approved":"yes","reason":"` + canary + `"}`), code: ignoreMalformed},
				{raw: []byte(`{"approved":true}`), code: ignoreMalformed},
				{raw: []byte(`{"digest":"d","approved":true,"v":2}`), code: ignoreMalformed},
				{raw: []byte(`{"digest":"d","approved":true,"extra":1}`), code: ignoreMalformed},
				{raw: []byte(`{"digest":"` + strings.Repeat("a", 9000) + `","approved":true}`), code: ignoreTooLarge},
				{dec: valid},
			},
			want: loop.Decision{Approved: true, Approver: "alice"},
		},
		{
			name:  "digest of another call",
			steps: []step{{dec: otherCall, code: ignoreDigest}},
			want:  loop.Decision{Expired: true},
		},
		{
			name:  "same call key with other arguments",
			steps: []step{{dec: otherArgs, code: ignoreDigest}},
			want:  loop.Decision{Expired: true},
		},
		{
			name: "missing approved is never a yes",
			steps: []step{{raw: nil, dec: func(req protocol.ApprovalRequest) protocol.ApprovalDecision {
				return protocol.ApprovalDecision{Digest: req.Digest}
			}, code: ignoreMalformed}},
			want: loop.Decision{Expired: true},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, GateConfig{})
			requests := f.watch(t)
			req := newRequest(t, "run1", "deploy", `{"env":"prod"}`, 400*time.Millisecond)
			res := f.approveAsync(t.Context(), req)
			got := recv(t, requests, 5*time.Second)
			var codes []string
			for _, s := range tt.steps {
				if s.raw != nil {
					f.decide(t, got, s.raw)
				} else {
					f.decide(t, got, s.dec(got))
				}
				if s.code != "" {
					codes = append(codes, s.code)
				}
			}
			r := recv(t, res, 5*time.Second)
			if r.err != nil {
				t.Fatalf("Approve: %v", r.err)
			}
			if sansProof(t, r.d) != tt.want {
				t.Errorf("Decision=%+v, want %+v", r.d, tt.want)
			}
			logs := f.logs.String()
			for _, c := range codes {
				if !strings.Contains(logs, `"reason":"`+c+`"`) {
					t.Errorf("no log line with reason %q: %s", c, logs)
				}
			}
			if strings.Contains(logs, canary) {
				t.Errorf("logs carry a decision payload: %s", logs)
			}
		})
	}
}

func TestGateIgnoresLateDecision(t *testing.T) {
	// The gate's clock jumps past the deadline while the real timer still
	// runs: a decision arriving then is late and must not count.
	var offset atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	f := newFixture(t, GateConfig{Now: now})
	requests := f.watch(t)
	req := newRequest(t, "run1", "deploy", `{}`, 10*time.Second)
	res := f.approveAsync(t.Context(), req)
	got := recv(t, requests, 5*time.Second)
	offset.Store(int64(11 * time.Second))
	f.decide(t, got, protocol.ApprovalDecision{Digest: got.Digest, Approved: ptr(true), Approver: "alice"})
	r := recv(t, res, 5*time.Second)
	if r.err != nil || r.d != (loop.Decision{Expired: true}) {
		t.Fatalf("Approve=%+v, %v; want Expired", r.d, r.err)
	}
	if !strings.Contains(f.logs.String(), `"reason":"late"`) {
		t.Errorf("late decision not logged: %s", f.logs.String())
	}
}

func TestGateFirstValidDecisionWins(t *testing.T) {
	f := newFixture(t, GateConfig{})
	requests := f.watch(t)
	req := newRequest(t, "run1", "deploy", `{}`, 5*time.Second)
	res := f.approveAsync(t.Context(), req)
	got := recv(t, requests, 5*time.Second)
	// Both go out on one connection, so the server delivers them in order.
	f.decide(t, got, protocol.ApprovalDecision{Digest: got.Digest, Approved: ptr(false), Reason: "no", Approver: "bob"})
	f.decide(t, got, protocol.ApprovalDecision{Digest: got.Digest, Approved: ptr(true), Approver: "mallory"})
	r := recv(t, res, 5*time.Second)
	if r.err != nil {
		t.Fatal(r.err)
	}
	if want := (loop.Decision{Reason: "no", Approver: "bob"}); r.d != want {
		t.Errorf("Decision=%+v, want the first one %+v", r.d, want)
	}
	// Both decisions are in the audit log; the note records the first.
	testsync.WaitFor(t, 5*time.Second, func() error {
		if n := countMsgs(t, f, "fleet.approval.decision.run1."+string(req.CallKey)); n != 2 {
			return errors.New("decisions not stored yet")
		}
		return nil
	})
	if n := lastNote(t, f, req); n.Outcome != protocol.NoteDenied || n.Approver != "bob" {
		t.Errorf("note=%+v, want denied by bob", n)
	}
	// The gate unsubscribed: only the stream listens on the decision subject.
	acc := f.srv.GlobalAccount()
	baseline := acc.Interest("fleet.approval.decision.nobody.waits")
	testsync.WaitFor(t, 5*time.Second, func() error {
		if acc.Interest("fleet.approval.decision.run1."+string(req.CallKey)) != baseline {
			return errors.New("gate still subscribed")
		}
		return nil
	})
}

func TestGateConcurrentRequestsWaitTogether(t *testing.T) {
	f := newFixture(t, GateConfig{})
	requests := f.watch(t)
	const n = 3
	results := make([]<-chan approveResult, n)
	start := time.Now()
	for i := range n {
		results[i] = f.approveAsync(t.Context(), newRequest(t, "run1", "deploy", `{"i":`+string(rune('0'+i))+`}`, 5*time.Second))
	}
	// Every request is out before any is answered: nothing serialises them.
	var got []protocol.ApprovalRequest
	for range n {
		got = append(got, recv(t, requests, 5*time.Second))
	}
	for _, r := range got {
		f.decide(t, r, protocol.ApprovalDecision{Digest: r.Digest, Approved: ptr(true)})
	}
	for i := range n {
		if r := recv(t, results[i], 5*time.Second); r.err != nil || !r.d.Approved {
			t.Errorf("call %d: %+v, %v; want approved", i, r.d, r.err)
		}
	}

	// Three expiring requests take one deadline, not three.
	start = time.Now()
	for i := range n {
		results[i] = f.approveAsync(t.Context(), newRequest(t, "run2", "deploy", `{}`, 300*time.Millisecond))
	}
	for i := range n {
		if r := recv(t, results[i], 5*time.Second); r.err != nil || !r.d.Expired {
			t.Errorf("call %d: %+v, %v; want expired", i, r.d, r.err)
		}
	}
	if el := time.Since(start); el > 700*time.Millisecond {
		t.Errorf("three concurrent 300ms approvals took %v, want about 300ms", el)
	}
}

func TestGateErrors(t *testing.T) {
	t.Run("connection closed before asking", func(t *testing.T) {
		f := newFixture(t, GateConfig{})
		f.nc.Close()
		d, err := f.gate.Approve(t.Context(), newRequest(t, "run1", "deploy", `{}`, time.Second))
		if err == nil || d.Approved {
			t.Fatalf("Approve=%+v, %v; want an error", d, err)
		}
	})
	t.Run("connection closed while waiting", func(t *testing.T) {
		f := newFixture(t, GateConfig{})
		requests := f.watch(t)
		res := f.approveAsync(t.Context(), newRequest(t, "run1", "deploy", `{}`, 5*time.Second))
		recv(t, requests, 5*time.Second)
		f.nc.Close()
		r := recv(t, res, 5*time.Second)
		if r.err == nil || r.d.Approved || r.d.Expired {
			t.Fatalf("Approve=%+v, %v; want an error", r.d, r.err)
		}
	})
	t.Run("server down", func(t *testing.T) {
		f := newFixture(t, GateConfig{})
		f.srv.Shutdown()
		r := recv(t, f.approveAsync(t.Context(), newRequest(t, "run1", "deploy", `{}`, 500*time.Millisecond)), 5*time.Second)
		if r.err == nil || r.d.Approved {
			t.Fatalf("Approve=%+v, %v; want an error", r.d, r.err)
		}
	})
	t.Run("no approvals stream", func(t *testing.T) {
		f := newFixture(t, GateConfig{})
		if err := f.js.DeleteStream(t.Context(), f.stream.CachedInfo().Config.Name); err != nil {
			t.Fatal(err)
		}
		d, err := f.gate.Approve(t.Context(), newRequest(t, "run1", "deploy", `{}`, time.Second))
		if err == nil || d.Approved {
			t.Fatalf("Approve=%+v, %v; want an error", d, err)
		}
	})
	t.Run("context cancelled while waiting", func(t *testing.T) {
		f := newFixture(t, GateConfig{})
		requests := f.watch(t)
		ctx, cancel := context.WithCancel(t.Context())
		req := newRequest(t, "run1", "deploy", `{}`, 5*time.Second)
		res := f.approveAsync(ctx, req)
		recv(t, requests, 5*time.Second)
		cancel()
		r := recv(t, res, 5*time.Second)
		if !errors.Is(r.err, context.Canceled) || r.d != (loop.Decision{}) {
			t.Fatalf("Approve=%+v, %v; want context.Canceled", r.d, r.err)
		}
		if n := lastNote(t, f, req); n.Outcome != protocol.NoteCancelled {
			t.Errorf("note=%+v, want cancelled", n)
		}
	})
	t.Run("handed off while waiting", func(t *testing.T) {
		// The run goes on on another coordinator: no outcome is recorded,
		// and a decision sent later is read by the next owner's gate.
		f := newFixture(t, GateConfig{})
		requests := f.watch(t)
		ctx, cancel := context.WithCancelCause(t.Context())
		req := newRequest(t, "run1", "deploy", `{}`, 5*time.Second)
		res := f.approveAsync(ctx, req)
		got := recv(t, requests, 5*time.Second)
		cancel(loop.ErrHandedOff)
		if r := recv(t, res, 5*time.Second); r.err == nil || r.d.Approved {
			t.Fatalf("Approve=%+v, %v; want an error", r.d, r.err)
		}
		f.decide(t, got, protocol.ApprovalDecision{Digest: got.Digest, Approved: ptr(true), Approver: "alice"})
		r := recv(t, f.approveAsync(t.Context(), req), 5*time.Second)
		if r.err != nil || !r.d.Approved {
			t.Fatalf("next owner's Approve=%+v, %v; want the stored approval", r.d, r.err)
		}
		if n := lastNote(t, f, req); n.Outcome != protocol.NoteApproved {
			t.Errorf("note=%+v, want approved (no cancelled note before it)", n)
		}
	})
	t.Run("context already cancelled", func(t *testing.T) {
		f := newFixture(t, GateConfig{})
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		if _, err := f.gate.Approve(ctx, newRequest(t, "run1", "deploy", `{}`, time.Second)); !errors.Is(err, context.Canceled) {
			t.Fatalf("err=%v, want context.Canceled", err)
		}
	})

	bad := []struct {
		name   string
		mutate func(*protocol.ApprovalRequest)
		want   error
	}{
		{"digest of other arguments", func(r *protocol.ApprovalRequest) {
			r.Digest, _ = protocol.Digest(r.RunID, r.CallKey, r.Tool, []byte(`{"x":2}`))
		}, ErrDigestMismatch},
		{"too large", func(r *protocol.ApprovalRequest) {
			r.Arguments = json.RawMessage(`{"x":"` + strings.Repeat("a", 2000) + `"}`)
		}, ErrTooLarge},
		{"run id not a token", func(r *protocol.ApprovalRequest) { r.RunID = "a.b" }, protocol.ErrInvalidField},
		{"tool not a token", func(r *protocol.ApprovalRequest) { r.Tool = "rm -rf" }, protocol.ErrInvalidField},
		{"arguments not JSON", func(r *protocol.ApprovalRequest) { r.Arguments = json.RawMessage(`{`) }, protocol.ErrMalformed},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, GateConfig{MaxMessageBytes: 1024})
			req := newRequest(t, "run1", "deploy", `{"x":1}`, time.Second)
			tt.mutate(&req)
			d, err := f.gate.Approve(t.Context(), req)
			if !errors.Is(err, tt.want) || d.Approved {
				t.Fatalf("Approve=%+v, %v; want %v", d, err, tt.want)
			}
			info, err := f.stream.Info(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if info.State.Msgs != 0 {
				t.Errorf("stream holds %d messages; a refused request must not be published", info.State.Msgs)
			}
		})
	}
}

func TestStreamIsAnAuditLog(t *testing.T) {
	f := newFixture(t, GateConfig{})
	requests := f.watch(t)
	req := newRequest(t, "run1", "deploy", `{"env":"prod"}`, 5*time.Second)
	res := f.approveAsync(t.Context(), req)
	got := recv(t, requests, 5*time.Second)
	f.decide(t, got, protocol.ApprovalDecision{Digest: got.Digest, Approved: ptr(true), Approver: "alice"})
	if r := recv(t, res, 5*time.Second); !r.d.Approved {
		t.Fatalf("Decision=%+v, %v; want approved", r.d, r.err)
	}

	ctx := t.Context()
	reqMsg, err := f.stream.GetLastMsgForSubject(ctx, "fleet.approval.request.run1."+string(req.CallKey))
	if err != nil {
		t.Fatalf("request not kept: %v", err)
	}
	if id := reqMsg.Header.Get(jetstream.MsgIDHeader); id != "approval-request-"+string(req.CallKey) {
		t.Errorf("Nats-Msg-Id=%q, want approval-request-<key>", id)
	}
	if _, err := f.stream.GetLastMsgForSubject(ctx, "fleet.approval.decision.run1."+string(req.CallKey)); err != nil {
		t.Errorf("decision not kept: %v", err)
	}
	lastNote(t, f, req)

	if err := f.stream.Purge(ctx); err == nil {
		t.Error("Purge succeeded on the approvals stream")
	}
	if err := f.stream.DeleteMsg(ctx, reqMsg.Sequence); err == nil {
		t.Error("DeleteMsg succeeded on the approvals stream")
	}
	if err := f.stream.SecureDeleteMsg(ctx, reqMsg.Sequence); err == nil {
		t.Error("SecureDeleteMsg succeeded on the approvals stream")
	}
	info, err := f.stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cfg := info.Config
	cfg.DenyDelete, cfg.DenyPurge = false, false
	if _, err := f.js.UpdateStream(ctx, cfg); err == nil {
		t.Error("an update lifted DenyDelete/DenyPurge")
	}
	if _, err := f.stream.GetMsg(ctx, reqMsg.Sequence); err != nil {
		t.Errorf("request gone after refused deletes: %v", err)
	}
}

// lastNote waits for the outcome note of req and returns it.
func lastNote(t testing.TB, f *fixture, req protocol.ApprovalRequest) protocol.ApprovalNote {
	t.Helper()
	subj := "fleet.approval.outcome." + string(req.RunID) + "." + string(req.CallKey)
	var n protocol.ApprovalNote
	testsync.WaitFor(t, 5*time.Second, func() error {
		m, err := f.stream.GetLastMsgForSubject(context.Background(), subj)
		if err != nil {
			return err
		}
		n, err = protocol.DecodeApprovalNote(m.Data)
		return err
	})
	return n
}

func countMsgs(t testing.TB, f *fixture, subj string) uint64 {
	t.Helper()
	info, err := f.stream.Info(context.Background(), jetstream.WithSubjectFilter(subj))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Subjects[subj]
}
