package natsbus_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natsbus/bustest"
	"github.com/toolfleet/toolfleet/internal/natstest"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// TestProvisionPlacesStreamsOnTaggedServers: on a cluster whose servers
// carry server_tags, provisioning with placement tags puts every stream's
// peers on servers with all the tags; provisioning again changes nothing,
// and a process that expects no placement finds nothing amiss. Tags fewer
// servers carry than the streams have replicas are refused with
// ErrNoPlacement, naming the tags.
func TestProvisionPlacesStreamsOnTaggedServers(t *testing.T) {
	c := natstest.StartTaggedCluster(t, [][]string{{"ssd", "az:a"}, {"ssd", "az:b"}, {"az:c"}})
	js := bustest.ConnectJS(t, c.URLs())
	s := protocol.Subjects{}

	_, err := natsbus.Provision(bustest.Ctx(t), js, s, natsbus.StreamConfig{Replicas: 3, PlacementTags: []string{"ssd"}})
	if !errors.Is(err, natsbus.ErrNoPlacement) || !strings.Contains(err.Error(), "ssd") {
		t.Fatalf("R3 on the two ssd servers: %v, want ErrNoPlacement naming the tag", err)
	}
	t.Logf("R3 on the two ssd servers: %v", err)
	if _, err := natsbus.Provision(bustest.Ctx(t), js, s, natsbus.StreamConfig{PlacementTags: []string{"gpu"}}); !errors.Is(err, natsbus.ErrNoPlacement) {
		t.Fatalf("a tag no server carries: %v, want ErrNoPlacement", err)
	}

	cfg := natsbus.StreamConfig{Replicas: 2, PlacementTags: []string{"ssd"}}
	// The refused attempts may have created nothing; provisioning now
	// creates, or places, every stream.
	if _, err := natsbus.Provision(bustest.Ctx(t), js, s, cfg); err != nil {
		t.Fatalf("R2 on the ssd servers: %v", err)
	}
	onSSD := map[string]bool{"n1": true, "n2": true}
	for _, fs := range natsbus.FleetStreams(s, natsbus.StreamConfig{}) {
		var info *jetstream.StreamInfo
		natstest.WaitFor(t, 30*time.Second, func() error {
			st, err := js.Stream(bustest.Ctx(t), fs.Config.Name)
			if err != nil {
				return err
			}
			info = st.CachedInfo()
			if info.Cluster == nil || info.Cluster.Leader == "" || len(info.Cluster.Replicas) != 1 {
				return errors.New("stream " + fs.Config.Name + " has no leader and follower yet")
			}
			return nil
		})
		peers := []string{info.Cluster.Leader, info.Cluster.Replicas[0].Name}
		for _, p := range peers {
			if !onSSD[p] {
				t.Errorf("%s has a peer on %s, which has no ssd tag (peers %v)", fs.Config.Name, p, peers)
			}
		}
		if pl := info.Config.Placement; pl == nil || len(pl.Tags) != 1 || pl.Tags[0] != "ssd" {
			t.Errorf("%s placement %+v, want tags [ssd]", fs.Config.Name, pl)
		}
	}

	again, err := natsbus.Provision(bustest.Ctx(t), js, s, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range again {
		if a.Action != natsbus.ActionUnchanged {
			t.Errorf("provisioning the same placement again: %s %s %v, want unchanged", a.Stream, a.Action, a.Fields)
		}
	}
	// Provisioning without tags (the default) leaves the operator's
	// placement; a process expecting no placement checks nothing of it.
	if _, err := natsbus.Provision(bustest.Ctx(t), js, s, natsbus.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(bustest.Ctx(t), s.CallsStream())
	if err != nil {
		t.Fatal(err)
	}
	if pl := st.CachedInfo().Config.Placement; pl == nil || len(pl.Tags) != 1 {
		t.Errorf("provisioning without tags changed the placement to %+v", pl)
	}
	guard := natsbus.NewStreamGuard(js, natsbus.StreamGuardConfig{Streams: natsbus.FleetStreams(s, natsbus.StreamConfig{})})
	if err := guard.Check(bustest.Ctx(t)); err != nil {
		t.Fatalf("a process expecting no placement: %v", err)
	}
}

func TestStreamConfigRefusesBadPlacementTags(t *testing.T) {
	for _, tag := range []string{"", "a b", "a,b", "tag\n", strings.Repeat("x", 65)} {
		err := natsbus.StreamConfig{PlacementTags: []string{tag}}.Validate()
		var ce *natsbus.ConfigError
		if !errors.As(err, &ce) || ce.Field != "PlacementTags" {
			t.Errorf("tag %q: %v, want a PlacementTags ConfigError", tag, err)
		}
	}
	if err := (natsbus.StreamConfig{PlacementTags: []string{"ssd", "az:eu-1a", "!spot"}}).Validate(); err != nil {
		t.Errorf("valid tags refused: %v", err)
	}
}
