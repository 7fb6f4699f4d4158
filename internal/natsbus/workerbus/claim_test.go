package workerbus_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natsbus/bustest"
	"github.com/toolfleet/toolfleet/internal/natsbus/stores"
	"github.com/toolfleet/toolfleet/internal/natsbus/workerbus"
	"github.com/toolfleet/toolfleet/internal/natstest"
	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/harness/harnesstest"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// fetchOne pulls one delivery from c.
func fetchOne(t *testing.T, c jetstream.Consumer) jetstream.Msg {
	t.Helper()
	batch, err := c.Fetch(1, jetstream.FetchMaxWait(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for m := range batch.Messages() {
		return m
	}
	t.Fatalf("no delivery within 10s: %v", batch.Error())
	return nil
}

// both runs a and b at the same moment and waits for them.
func both(a, b func()) {
	var start, done sync.WaitGroup
	start.Add(1)
	for _, fn := range []func(){a, b} {
		done.Add(1)
		go func() {
			defer done.Done()
			start.Wait()
			fn()
		}()
	}
	start.Done()
	done.Wait()
}

// TestTwoDeliveriesClaimAtOnce: two deliveries of one non-idempotent call
// claim it at the same moment, on two connections — a redelivery of the
// stored message after the ack wait, and a copy of the call stored under
// another Nats-Msg-Id. Exactly one claim is stored, every time; both
// deliveries are settled.
func TestTwoDeliveriesClaimAtOnce(t *testing.T) {
	for _, tt := range []struct {
		name string
		copy bool
	}{{name: "redelivery"}, {name: "copy under a new message id", copy: true}} {
		t.Run(tt.name, func(t *testing.T) {
			f := bustest.NewFleet(t)
			var runs atomic.Int64
			w1, w2 := f.Claimer(t, "w1", &runs), f.Claimer(t, "w2", &runs)
			calls := f.TakeCalls(t, "charge", 300*time.Millisecond)
			d, run, _ := f.OpenRun(t)
			for i := range 8 {
				call := bustest.NewCall(run, "charge", `{}`, 30*time.Second)
				if err := d.Publish(bustest.Ctx(t), loop.Outgoing{Call: call}); err != nil {
					t.Fatal(err)
				}
				if tt.copy {
					f.Republish(t, call)
				}
				m1 := fetchOne(t, calls)
				m2 := fetchOne(t, calls) // the copy, or the redelivery once the ack wait passed
				var e1, e2 error
				both(func() { e1 = w1.ClaimDelivery(bustest.Ctx(t), m1, call) }, func() { e2 = w2.ClaimDelivery(bustest.Ctx(t), m2, call) })
				won := 0
				for _, err := range []error{e1, e2} {
					switch {
					case err == nil:
						won++
					case !errors.Is(err, stores.ErrClaimed):
						t.Fatalf("round %d: a claim failed: %v", i, err)
					}
				}
				if won != 1 {
					t.Fatalf("round %d: %d claims held the call (%v, %v), want exactly one", i, won, e1, e2)
				}
				if f.StartRecord(t, call) == nil {
					t.Fatalf("round %d: no start record stored", i)
				}
			}
			natstest.WaitFor(t, 10*time.Second, func() error {
				if info := f.ConsumerInfo(t, "charge"); info.NumAckPending != 0 || info.NumPending != 0 {
					return fmt.Errorf("NumAckPending=%d NumPending=%d, want every delivery settled", info.NumAckPending, info.NumPending)
				}
				return nil
			})
		})
	}
}

// TestWithdrawalRacesAClaim: the coordinator withdraws a non-idempotent
// call at the moment a worker holding a delivery of it claims it. Exactly
// one of them holds the call, every time: a withdrawal that reports true
// leaves the worker refused; a claim that holds makes the withdrawal
// report false (it may have run). The record stored says which.
func TestWithdrawalRacesAClaim(t *testing.T) {
	f := bustest.NewFleet(t)
	var runs atomic.Int64
	w := f.Claimer(t, "w1", &runs)
	calls := f.TakeCalls(t, "charge", 30*time.Second)
	d, run, in := f.OpenRun(t)
	wi := bustest.Withdrawer(t, in)
	wins := map[string]int{}
	for i := range 12 {
		call := bustest.NewCall(run, "charge", `{}`, 30*time.Second)
		if err := d.Publish(bustest.Ctx(t), loop.Outgoing{Call: call, AtMostOnce: true}); err != nil {
			t.Fatal(err)
		}
		m := fetchOne(t, calls)
		var (
			claimErr  error
			withdrawn bool
			wErr      error
		)
		both(func() { claimErr = w.ClaimDelivery(bustest.Ctx(t), m, call) }, func() { withdrawn, wErr = wi.Withdraw(bustest.Ctx(t), call.CallKey) })
		if wErr != nil {
			t.Fatalf("round %d: Withdraw: %v", i, wErr)
		}
		if claimErr != nil && !errors.Is(claimErr, stores.ErrClaimed) {
			t.Fatalf("round %d: claim: %v", i, claimErr)
		}
		claimed := claimErr == nil
		if claimed == withdrawn {
			t.Fatalf("round %d: claimed %v and withdrawn %v: want exactly one", i, claimed, withdrawn)
		}
		rec := f.StartRecord(t, call)
		if rec == nil {
			t.Fatalf("round %d: no start record", i)
		}
		if got := strings.Contains(string(rec.Data), `"withdrawn":true`); got != withdrawn {
			t.Fatalf("round %d: the record %s, withdrawn %v", i, rec.Data, withdrawn)
		}
		if withdrawn {
			wins["withdrawal"]++
		} else {
			wins["claim"]++
		}
	}
	t.Logf("winners: %v", wins)
	f.WaitIdle(t, "charge")
}

// TestForgedStartRecords: a start record forged by anyone who may write
// the starts stream (a worker or a coordinator credential) can keep a
// call from running, never make it run twice. A record stored before the
// call's claim — even one that never expires — holds the call: no worker
// runs it, and its withdrawal reports that it may have started. Once a
// claim is stored, no other record is (with the expected-sequence header
// or without, as a roll-up), nor is the claim removed. A copy of a claim's
// body with another TTL is not taken for the claim by its writer.
func TestForgedStartRecords(t *testing.T) {
	f := bustest.NewFleet(t)
	var runs atomic.Int64
	release := make(chan struct{})
	f.StartWorker(t, harnesstest.New(t, harness.Config{}, gated("charge", &runs, release, false)), workerbus.WorkerConfig{Name: "w1"})
	d, run, in := f.OpenRun(t)
	forger := natstest.Connect(t, f.Srv)
	forge := func(call protocol.Call, hdr map[string]string) error {
		subject, _ := f.Subjects.Start(call.Tool, call.RunID, call.CallKey)
		msg := nats.NewMsg(subject)
		msg.Data = []byte(`{"v":1,"worker":"forger","nonce":"x"}`)
		for k, v := range hdr {
			msg.Header.Set(k, v)
		}
		r, err := forger.RequestMsg(msg, 5*time.Second)
		if err != nil {
			return err
		}
		if strings.Contains(string(r.Data), `"error"`) {
			return errors.New(string(r.Data))
		}
		return nil
	}

	// A record that would never expire is refused: the stream takes no
	// per-message TTL. Forged first, without one: the call does not run.
	first := bustest.NewCall(run, "charge", `{}`, 30*time.Second)
	for _, ttl := range []string{"never", "1000h"} {
		if err := forge(first, map[string]string{jetstream.MsgTTLHeader: ttl}); err == nil {
			t.Fatalf("a forged record with Nats-TTL %s was stored", ttl)
		}
	}
	if err := forge(first, nil); err != nil {
		t.Fatalf("storing the forged record: %v", err)
	}
	if err := d.Publish(bustest.Ctx(t), loop.Outgoing{Call: first, AtMostOnce: true}); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		if !f.Log.Contains("call already claimed by another delivery, or withdrawn: not run") {
			return errors.New("the worker has not refused the call")
		}
		return nil
	})
	if ok, err := bustest.Withdrawer(t, in).Withdraw(bustest.Ctx(t), first.CallKey); ok || err != nil {
		t.Fatalf("Withdraw of a call a forged record holds = %v, %v; want false, nil (it cannot tell it did not run)", ok, err)
	}
	if n := runs.Load(); n != 0 {
		t.Fatalf("the call a forged record holds ran %d times, want never", n)
	}

	// Claimed first: nothing forged afterwards is stored, nothing removes
	// the claim, and the call runs once.
	second := bustest.NewCall(run, "charge", `{}`, 30*time.Second)
	if err := d.Publish(bustest.Ctx(t), loop.Outgoing{Call: second, AtMostOnce: true}); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		if runs.Load() == 0 {
			return errors.New("the call has not started")
		}
		return nil
	})
	claim := f.StartRecord(t, second)
	if claim == nil || !strings.Contains(string(claim.Data), `"worker":"w1"`) {
		t.Fatalf("the worker's claim: %+v", claim)
	}
	for name, hdr := range map[string]map[string]string{
		"plain":                         nil,
		"expected last sequence 0":      {jetstream.ExpectedLastSubjSeqHeader: "0"},
		"expected last sequence of it":  {jetstream.ExpectedLastSubjSeqHeader: fmt.Sprint(claim.Sequence)},
		"roll-up of the subject":        {"Nats-Rollup": "sub"},
		"with a one-second TTL":         {jetstream.MsgTTLHeader: "1"},
		"expected last sequence, a TTL": {jetstream.ExpectedLastSubjSeqHeader: fmt.Sprint(claim.Sequence), jetstream.MsgTTLHeader: "1"},
	} {
		if err := forge(second, hdr); err == nil {
			t.Errorf("a forged record (%s) after the claim was stored", name)
		}
	}
	st, err := f.JS.Stream(bustest.Ctx(t), f.Subjects.StartsStream())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.DeleteMsg(bustest.Ctx(t), claim.Sequence); err == nil {
		t.Error("the claim was removed")
	}
	if got := f.StartRecord(t, second); got == nil || got.Sequence != claim.Sequence {
		t.Fatalf("the record after the forgeries: %+v, want the claim, unchanged", got)
	}
	close(release)
	if r := bustest.NextResult(t, in, second.CallKey, 15*time.Second); r.Outcome != protocol.OutcomeOK {
		t.Fatalf("result %+v, want ok", r)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("the tool ran %d times, want once", n)
	}

	// A writer whose PubAck was lost finds its own record by its body
	// (its nonce): another body is not its own.
	third := bustest.NewCall(run, "charge", `{}`, 30*time.Second)
	if err := forge(third, nil); err != nil {
		t.Fatal(err)
	}
	subject, _ := f.Subjects.Start(third.Tool, third.RunID, third.CallKey)
	for body, want := range map[string]bool{`{"v":1,"worker":"forger","nonce":"y"}`: false, `{"v":1,"worker":"forger","nonce":"x"}`: true} {
		mine := nats.NewMsg(subject)
		mine.Data = []byte(body)
		if got, err := stores.OwnStart(bustest.Ctx(t), f.JS, f.Subjects.StartsStream(), mine); err != nil || got != want {
			t.Errorf("OwnStart of %s = %v, %v; want %v", body, got, err, want)
		}
	}
}

// TestStartsStreamFullFailsClosed: when the starts stream is full a claim
// is refused by the server, and the call does not run; its withdrawal
// cannot be stored either, and says it cannot tell (the loop answers
// outcome_unknown), never that the call ran or did not.
func TestStartsStreamFullFailsClosed(t *testing.T) {
	f := bustest.NewFleet(t)
	st, err := f.JS.Stream(bustest.Ctx(t), f.Subjects.StartsStream())
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	cfg.MaxBytes = 4 << 10
	if _, err := f.JS.UpdateStream(bustest.Ctx(t), cfg); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		if i > 1000 {
			t.Fatal("the starts stream took 1000 records under a 4 KiB bound")
		}
		msg := nats.NewMsg(fmt.Sprintf("%s.start.filler.run.key%d", protocol.DefaultPrefix, i))
		msg.Data = []byte(strings.Repeat("x", 200))
		if _, err := f.JS.PublishMsg(bustest.Ctx(t), msg); err != nil {
			break // full
		}
	}
	var runs atomic.Int64
	f.StartWorker(t, harnesstest.New(t, harness.Config{}, bustest.Counting("charge", &runs, 0, false)), workerbus.WorkerConfig{Name: "w1"})
	d, run, in := f.OpenRun(t)
	call := bustest.NewCall(run, "charge", `{}`, 30*time.Second)
	if err := d.Publish(bustest.Ctx(t), loop.Outgoing{Call: call, AtMostOnce: true}); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		if !f.Log.Contains("could not claim a non-idempotent call before running it: not run") {
			return errors.New("the worker has not tried to claim the call")
		}
		return nil
	})
	if ok, err := bustest.Withdrawer(t, in).Withdraw(bustest.Ctx(t), call.CallKey); ok || err == nil {
		t.Fatalf("Withdraw with the starts stream full = %v, %v; want false and an error (it cannot tell)", ok, err)
	}
	if n := runs.Load(); n != 0 {
		t.Fatalf("the tool ran %d times with the starts stream full, want never", n)
	}
	if f.StartRecord(t, call) != nil {
		t.Fatal("a start record was stored in a full stream")
	}
}

// noAck is a delivery whose acknowledgement is lost.
type noAck struct{ jetstream.Msg }

func (noAck) Ack() error { return nil }

// TestStartRecordExpiryDoesNotReopenACall: a worker claims a
// non-idempotent call and dies before its acknowledgement reaches the
// server, so the call's message stays, to be delivered again. The claim's
// record goes (in life it ages out with the starts stream's MaxAge, an
// hour past the longest a call's message stays; here the test purges it
// once the call's wait has ended): the call's deadline has passed by then, so the next delivery
// neither runs it, nor claims it, nor answers it (its coordinator answered
// at the end of its wait; an answer now could say "not run" of a call
// that ran), and the message is settled.
func TestStartRecordExpiryDoesNotReopenACall(t *testing.T) {
	bustest.SetStartMargin(t, time.Second)
	f := bustest.NewFleet(t)
	var runs atomic.Int64
	calls := f.TakeCalls(t, "charge", 30*time.Second)
	d, run, in := f.OpenRun(t)
	call := bustest.NewCall(run, "charge", `{}`, time.Second)
	if err := d.Publish(bustest.Ctx(t), loop.Outgoing{Call: call, AtMostOnce: true}); err != nil {
		t.Fatal(err)
	}
	m := fetchOne(t, calls)
	if err := f.Claimer(t, "dead", &runs).ClaimDelivery(bustest.Ctx(t), noAck{m}, call); err != nil {
		t.Fatalf("the first claim: %v", err)
	}
	if f.StartRecord(t, call) == nil {
		t.Fatal("no start record after the claim")
	}
	natstest.WaitFor(t, 15*time.Second, func() error {
		if time.Now().Before(call.CallDeadline().ResultBy().Add(time.Second)) {
			return errors.New("the call's wait has not ended")
		}
		return nil
	})
	starts, err := f.JS.Stream(bustest.Ctx(t), f.Subjects.StartsStream())
	if err != nil {
		t.Fatal(err)
	}
	subject, _ := f.Subjects.Start(call.Tool, call.RunID, call.CallKey)
	if err := starts.Purge(bustest.Ctx(t), jetstream.WithPurgeSubject(subject)); err != nil {
		t.Fatal(err)
	}
	if f.StartRecord(t, call) != nil {
		t.Fatal("the claim's record is still stored")
	}
	// The dead worker's delivery is handed to a live worker (its ack
	// wait, 2s, passes after it starts pulling).
	w, _ := f.StartWorker(t, harnesstest.New(t, harness.Config{}, bustest.Counting("charge", &runs, 0, false)), workerbus.WorkerConfig{Name: "w2"})
	f.WaitIdle(t, "charge")
	if st, _ := w.ToolStats("charge"); st.Delivered != 1 || st.Calls != 0 {
		t.Fatalf("the live worker's stats %+v: want the call delivered once and not run", st)
	}
	if n := runs.Load(); n != 0 {
		t.Fatalf("the tool ran %d times, want never (the test's claim ran nothing)", n)
	}
	if f.StartRecord(t, call) != nil {
		t.Fatal("the call was claimed again after its record expired")
	}
	if !f.Log.Contains("call expired before it started: not run") {
		t.Error("the live worker did not log the expired call")
	}
	select {
	case ev := <-in.Events():
		if ev.Result != nil && ev.Result.CallKey == call.CallKey {
			t.Fatalf("the call was answered %+v after its record expired, want no answer", ev.Result)
		}
	default:
	}
}

// TestStartRecordsOnACluster: on a 3-node cluster the starts stream has
// three replicas and per-message TTLs, and of six claims of one call made
// at once through the three nodes exactly one is stored.
func TestStartRecordsOnACluster(t *testing.T) {
	c := natstest.StartCluster(t, 3)
	s := protocol.Subjects{}
	if _, err := natsbus.Provision(bustest.Ctx(t), bustest.ConnectJS(t, c.URLs()), s, natsbus.StreamConfig{Replicas: 3}); err != nil {
		t.Fatalf("Provision R3: %v", err)
	}
	var jss []jetstream.JetStream
	for i := range 6 {
		jss = append(jss, bustest.ConnectJS(t, c.ClientURL(i%3)))
	}
	st, err := jss[0].Stream(bustest.Ctx(t), s.StartsStream())
	if err != nil {
		t.Fatal(err)
	}
	if cfg := st.CachedInfo().Config; cfg.Replicas != 3 || cfg.AllowMsgTTL {
		t.Fatalf("the starts stream: %d replicas, TTLs %v; want 3, false", cfg.Replicas, cfg.AllowMsgTTL)
	}
	run := protocol.NewRunID()
	for round := range 5 {
		key := protocol.NewCallKey()
		errs := make([]error, len(jss))
		var wg sync.WaitGroup
		var start sync.WaitGroup
		start.Add(1)
		for i, js := range jss {
			wg.Add(1)
			go func() {
				defer wg.Done()
				start.Wait()
				errs[i] = bustest.WriteStart(context.Background(), js, s, "charge", run, key, fmt.Sprint("w", i))
			}()
		}
		start.Done()
		wg.Wait()
		won := 0
		for _, err := range errs {
			switch {
			case err == nil:
				won++
			case !errors.Is(err, stores.ErrClaimed):
				t.Fatalf("round %d: a claim failed: %v", round, err)
			}
		}
		if won != 1 {
			t.Fatalf("round %d: %d claims stored (%v), want one", round, won, errs)
		}
		subject, _ := s.Start("charge", run, key)
		m, err := st.GetLastMsgForSubject(bustest.Ctx(t), subject)
		if err != nil || m.Header.Get(jetstream.MsgTTLHeader) != "" {
			t.Fatalf("round %d: the record %+v, %v; want one, without a TTL", round, m, err)
		}
	}
}

// TestProvisionRefusesAStartsStreamWithTTLs: a starts stream made by an
// earlier release takes per-message TTLs, which nats-server cannot turn
// off; provisioning says so (ErrStreamTakesTTLs) rather than leave it, and
// once the operator has removed it provisioning makes one that refuses a
// record with Nats-TTL: never.
func TestProvisionRefusesAStartsStreamWithTTLs(t *testing.T) {
	srv := natstest.Start(t)
	js := bustest.ConnectJS(t, srv.ClientURL())
	s := protocol.Subjects{}
	var old jetstream.StreamConfig
	for _, fs := range natsbus.FleetStreams(s, natsbus.StreamConfig{}) {
		if fs.Config.Name == s.StartsStream() {
			old = fs.Config
		}
	}
	old.AllowMsgTTL = true
	if _, err := js.CreateStream(bustest.Ctx(t), old); err != nil {
		t.Fatal(err)
	}
	if _, err := natsbus.Provision(bustest.Ctx(t), js, s, natsbus.StreamConfig{}); !errors.Is(err, natsbus.ErrStreamTakesTTLs) {
		t.Fatalf("Provision over a starts stream with TTLs: %v, want ErrStreamTakesTTLs", err)
	}
	if err := js.DeleteStream(bustest.Ctx(t), s.StartsStream()); err != nil {
		t.Fatal(err)
	}
	if _, err := natsbus.Provision(bustest.Ctx(t), js, s, natsbus.StreamConfig{}); err != nil {
		t.Fatalf("Provision once it is removed: %v", err)
	}
	subject, _ := s.Start("charge", protocol.NewRunID(), protocol.NewCallKey())
	msg := nats.NewMsg(subject)
	msg.Data = []byte(`{"v":1,"worker":"x","nonce":"n"}`)
	msg.Header.Set(jetstream.MsgTTLHeader, "never")
	if _, err := js.PublishMsg(bustest.Ctx(t), msg); err == nil {
		t.Fatal("the provisioned starts stream stored a record with Nats-TTL: never")
	}
}
