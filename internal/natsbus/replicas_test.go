package natsbus_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natsbus/bustest"
	"github.com/toolfleet/toolfleet/internal/natstest"
	"github.com/toolfleet/toolfleet/internal/testsync"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// TestProvisionRefusesReplicasASingleServerCannotHold: three replicas on
// one server are refused with ErrTooFewServers, naming the count.
func TestProvisionRefusesReplicasASingleServerCannotHold(t *testing.T) {
	js, err := jetstream.New(natstest.Connect(t, natstest.Start(t)))
	if err != nil {
		t.Fatal(err)
	}
	_, err = natsbus.Provision(bustest.Ctx(t), js, protocol.Subjects{}, natsbus.StreamConfig{Replicas: 3})
	if !errors.Is(err, natsbus.ErrTooFewServers) {
		t.Fatalf("Provision with 3 replicas on one server: %v, want ErrTooFewServers", err)
	}
}

// TestProvisionReplicatesOnACluster: on a 3-node cluster every stream and
// bucket gets three replicas, a process expecting the default (one) finds
// nothing amiss, and provisioning one replica later lowers nothing.
func TestProvisionReplicatesOnACluster(t *testing.T) {
	c := natstest.StartCluster(t, 3)
	js := bustest.ConnectJS(t, c.URLs())
	s := protocol.Subjects{}
	if _, err := natsbus.Provision(bustest.Ctx(t), js, s, natsbus.StreamConfig{Replicas: 3}); err != nil {
		t.Fatalf("Provision R3: %v", err)
	}
	for _, fs := range natsbus.FleetStreams(s, natsbus.StreamConfig{}) {
		st, err := js.Stream(bustest.Ctx(t), fs.Config.Name)
		if err != nil {
			t.Fatal(err)
		}
		if n := st.CachedInfo().Config.Replicas; n != 3 {
			t.Errorf("%s has %d replicas, want 3", fs.Config.Name, n)
		}
	}
	guard := natsbus.NewStreamGuard(js, natsbus.StreamGuardConfig{Streams: natsbus.FleetStreams(s, natsbus.StreamConfig{})})
	if err := guard.Check(bustest.Ctx(t)); err != nil {
		t.Fatalf("a process expecting one replica: %v", err)
	}
	again, err := natsbus.Provision(bustest.Ctx(t), js, s, natsbus.StreamConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range again {
		if a.Action != natsbus.ActionUnchanged {
			t.Errorf("provisioning R1 over R3: %s %s %v, want unchanged", a.Stream, a.Action, a.Fields)
		}
	}
}

// TestStartingProcessWaitsForAStreamLeader: a process starting while its
// streams have no leader (two of three nodes down, so no quorum) does not
// exit on the first unanswered check: CheckAtStart keeps checking and
// succeeds once a node is back and a leader is elected.
func TestStartingProcessWaitsForAStreamLeader(t *testing.T) {
	c := natstest.StartCluster(t, 3)
	js := bustest.ConnectJS(t, c.ClientURL(0), nats.MaxReconnects(-1))
	s := protocol.Subjects{}
	if _, err := natsbus.Provision(bustest.Ctx(t), js, s, natsbus.StreamConfig{Replicas: 3}); err != nil {
		t.Fatalf("Provision R3: %v", err)
	}
	c.Kill(1)
	c.Kill(2)
	var logs testsync.Buffer
	guard := natsbus.NewStreamGuard(js, natsbus.StreamGuardConfig{
		Streams: natsbus.FleetStreams(s, natsbus.StreamConfig{}), Timeout: time.Second, StartWait: 2 * time.Minute,
		Logger: zerolog.New(&logs),
	})
	var drift *natsbus.DriftError
	if err := guard.Check(bustest.Ctx(t)); err == nil || errors.As(err, &drift) {
		t.Fatalf("a check without quorum: %v, want the server not answering", err)
	}
	done := make(chan error, 1)
	go func() { done <- guard.CheckAtStart(context.Background()) }()
	testsync.WaitUntil(t, time.Minute, "CheckAtStart to check again", func() bool {
		return strings.Contains(logs.String(), "did not answer yet")
	})
	c.Restart(1)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("CheckAtStart once a node is back: %v", err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("CheckAtStart did not return")
	}
}
