package runner_test

import (
	"errors"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natstest"
	"github.com/toolfleet/toolfleet/pkg/model/scripted"
	"github.com/toolfleet/toolfleet/pkg/protocol"
	"github.com/toolfleet/toolfleet/pkg/runner"
)

// TestProvisionStreamsRestoresARewrittenStream: a stream every
// coordinator uses, rewritten (its max_msgs changed), makes New refuse to
// start with the drift; with ProvisionStreams New restores it and starts,
// and with a Registerer the runner's stream checks are counted there.
func TestProvisionStreamsRestoresARewrittenStream(t *testing.T) {
	srv := natstest.Start(t)
	nc := natstest.Connect(t, srv)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	s := protocol.Subjects{}
	if _, err := natsbus.Provision(t.Context(), js, s, natsbus.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	want := natsbus.StreamsOf(natsbus.FleetStreams(s, natsbus.StreamConfig{}), natsbus.RoleCoordinator)[0].Config
	bad := want
	bad.MaxMsgs = 1
	if _, err := js.UpdateStream(t.Context(), bad); err != nil {
		t.Fatal(err)
	}

	_, err = runner.New(t.Context(), nc, runner.Config{Model: scripted.Demo()})
	var drift *natsbus.DriftError
	if !errors.As(err, &drift) {
		t.Fatalf("New on a rewritten %s: %v, want a *natsbus.DriftError", want.Name, err)
	}

	reg := prometheus.NewRegistry()
	r, err := runner.New(t.Context(), nc, runner.Config{Model: scripted.Demo(), ProvisionStreams: true, Registerer: reg})
	if err != nil {
		t.Fatalf("New with ProvisionStreams: %v", err)
	}
	defer r.Close()
	if err := r.StreamsErr(); err != nil {
		t.Fatalf("StreamsErr after New with ProvisionStreams: %v", err)
	}
	st, err := js.Stream(t.Context(), want.Name)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.CachedInfo().Config.MaxMsgs; got != want.MaxMsgs {
		t.Fatalf("%s max_msgs = %d after New with ProvisionStreams, want %d", want.Name, got, want.MaxMsgs)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var checks bool
	for _, f := range families {
		checks = checks || f.GetName() == "toolfleet_stream_config_checks_total"
	}
	if !checks {
		t.Fatal("no toolfleet_stream_config_checks_total in the Registerer after New")
	}
}
