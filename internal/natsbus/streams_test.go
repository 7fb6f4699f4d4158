package natsbus_test

import (
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natsbus/bustest"
	"github.com/toolfleet/toolfleet/internal/natstest"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

func TestEnsureStreamsIsIdempotentAndConcurrent(t *testing.T) {
	srv := natstest.Start(t)
	subjects := protocol.Subjects{Prefix: "acme"}

	// Several processes starting at once, each with its own connection.
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		nc := natstest.Connect(t, srv)
		js, _ := jetstream.New(nc)
		wg.Go(func() { errs <- natsbus.EnsureStreams(bustest.Ctx(t), js, subjects, natsbus.StreamConfig{}) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent EnsureStreams: %v", err)
		}
	}
	nc := natstest.Connect(t, srv)
	js, _ := jetstream.New(nc)
	for range 2 {
		if err := natsbus.EnsureStreams(bustest.Ctx(t), js, subjects, natsbus.StreamConfig{}); err != nil {
			t.Fatalf("EnsureStreams again: %v", err)
		}
	}

	info := func(name string) jetstream.StreamConfig {
		s, err := js.Stream(bustest.Ctx(t), name)
		if err != nil {
			t.Fatalf("stream %s: %v", name, err)
		}
		return s.CachedInfo().Config
	}
	calls := info("ACME_CALLS")
	if calls.Retention != jetstream.WorkQueuePolicy || calls.Discard != jetstream.DiscardNew ||
		calls.MaxMsgs != natsbus.DefaultMaxPendingCalls || !calls.DiscardNewPerSubject ||
		calls.Duplicates != 2*time.Minute || calls.MaxAge != time.Hour ||
		calls.MaxMsgSize != protocol.DefaultMaxMessageBytes || calls.Storage != jetstream.FileStorage ||
		len(calls.Subjects) != 1 || calls.Subjects[0] != "acme.call.>" {
		t.Errorf("calls stream config = %+v", calls)
	}
	results := info("ACME_RESULTS")
	if results.Retention != jetstream.LimitsPolicy || results.MaxAge != time.Hour ||
		results.Duplicates != 2*time.Minute || results.Subjects[0] != "acme.result.>" {
		t.Errorf("results stream config = %+v", results)
	}
	approvals := info("ACME_APPROVALS")
	if approvals.Retention != jetstream.LimitsPolicy || !approvals.DenyDelete || !approvals.DenyPurge ||
		approvals.MaxAge != 30*24*time.Hour || approvals.Subjects[0] != "acme.approval.>" {
		t.Errorf("approvals stream config = %+v", approvals)
	}
	kv, err := js.KeyValue(bustest.Ctx(t), "acme_tools")
	if err != nil {
		t.Fatalf("catalog bucket: %v", err)
	}
	st, err := kv.Status(bustest.Ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if st.History() != 1 {
		t.Errorf("catalog bucket history = %d, want 1", st.History())
	}
}

func TestEnsureStreamsRefusesBadConfig(t *testing.T) {
	srv := natstest.Start(t)
	js, _ := jetstream.New(natstest.Connect(t, srv))
	if err := natsbus.EnsureStreams(bustest.Ctx(t), js, protocol.Subjects{}, natsbus.StreamConfig{Replicas: 9}); err == nil {
		t.Fatal("EnsureStreams accepted 9 replicas")
	}
}

// TestEnsureStreamsLeavesAnUnchangedStreamAlone: running EnsureStreams
// again with the same configuration updates nothing (the server announces
// every update, even one that changes nothing, and nats-server races a
// stream update against a consumer created on the stream at the same
// moment); a changed setting is still applied.
func TestEnsureStreamsLeavesAnUnchangedStreamAlone(t *testing.T) {
	srv := natstest.Start(t)
	nc := natstest.Connect(t, srv)
	js, _ := jetstream.New(nc)
	subjects := protocol.Subjects{}
	if err := natsbus.EnsureStreams(bustest.Ctx(t), js, subjects, natsbus.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	updates, err := nc.SubscribeSync("$JS.EVENT.ADVISORY.STREAM.UPDATED.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := natsbus.EnsureStreams(bustest.Ctx(t), js, subjects, natsbus.StreamConfig{}); err != nil {
			t.Fatal(err)
		}
	}
	// The results stream is not the first EnsureStreams sees.
	if err := natsbus.EnsureStreams(bustest.Ctx(t), js, subjects, natsbus.StreamConfig{ResultsMaxAge: 2 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	// Advisories arrive in order: the first is the change.
	m, err := updates.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatalf("no advisory for the changed stream: %v", err)
	}
	if want := "$JS.EVENT.ADVISORY.STREAM.UPDATED." + subjects.ResultsStream(); m.Subject != want {
		t.Fatalf("first update advisory on %s, want %s: an unchanged stream was updated", m.Subject, want)
	}
	s, err := js.Stream(bustest.Ctx(t), subjects.ResultsStream())
	if err != nil {
		t.Fatal(err)
	}
	if got := s.CachedInfo().Config.MaxAge; got != 2*time.Hour {
		t.Fatalf("results stream MaxAge = %v after the change, want 2h", got)
	}
}
