package natsbus_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/internal/natsbus"
	"github.com/toolfleet/toolfleet/internal/natsbus/bustest"
	"github.com/toolfleet/toolfleet/internal/natstest"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// TestProvisionIsIdempotentAndMatchesTheCheck: a provisioned fleet is
// exactly what every process expects, and provisioning again changes
// nothing.
func TestProvisionIsIdempotentAndMatchesTheCheck(t *testing.T) {
	srv := natstest.Start(t)
	js, err := jetstream.New(natstest.Connect(t, srv))
	if err != nil {
		t.Fatal(err)
	}
	s := protocol.Subjects{}
	list := natsbus.FleetStreams(s, natsbus.StreamConfig{})
	first, err := natsbus.Provision(bustest.Ctx(t), js, s, natsbus.StreamConfig{})
	if err != nil {
		t.Fatalf("Provision: %v", err)
	}
	if len(first) != len(list) {
		t.Fatalf("Provision did %d actions, want one per stream (%d)", len(first), len(list))
	}
	for _, a := range first {
		if a.Action != natsbus.ActionCreated {
			t.Errorf("%s: %s, want created", a.Stream, a.Action)
		}
	}
	again, err := natsbus.Provision(bustest.Ctx(t), js, s, natsbus.StreamConfig{})
	if err != nil {
		t.Fatalf("Provision again: %v", err)
	}
	for _, a := range again {
		if a.Action != natsbus.ActionUnchanged {
			t.Errorf("%s: %s %v, want unchanged", a.Stream, a.Action, a.Fields)
		}
	}
	g := natsbus.NewStreamGuard(js, natsbus.StreamGuardConfig{Streams: list})
	if err := g.Check(bustest.Ctx(t)); err != nil {
		t.Fatalf("check of a provisioned fleet: %v", err)
	}
	// The buckets are usable as buckets.
	for _, b := range []string{s.CatalogBucket(), s.RunsBucket(), s.AgentsBucket()} {
		kv, err := js.KeyValue(bustest.Ctx(t), b)
		if err != nil {
			t.Fatalf("bucket %s: %v", b, err)
		}
		if _, err := kv.Put(bustest.Ctx(t), "k", []byte("v")); err != nil {
			t.Fatalf("bucket %s put: %v", b, err)
		}
	}
}

// TestStreamGuardDetectsEveryKindOfRewrite rewrites each stream in each
// way an attacker with STREAM.UPDATE could, and checks that the guard
// names the stream and field, refuses (Err, Wait), reports to its
// observer, and that Provision restores the stream.
func TestStreamGuardDetectsEveryKindOfRewrite(t *testing.T) {
	t.Parallel() // its own server; it waits on the fleet, not the CPU
	srv := natstest.Start(t)
	js, err := jetstream.New(natstest.Connect(t, srv))
	if err != nil {
		t.Fatal(err)
	}
	s := protocol.Subjects{}
	if _, err := natsbus.Provision(bustest.Ctx(t), js, s, natsbus.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(bustest.Ctx(t), jetstream.StreamConfig{Name: "SCRATCH", Subjects: []string{"scratch"}, MaxMsgSize: 1024}); err != nil {
		t.Fatal(err)
	}
	list := natsbus.FleetStreams(s, natsbus.StreamConfig{})
	obs := &recordingObserver{}
	log := natstest.NewLogBuffer(t)
	g := natsbus.NewStreamGuard(js, natsbus.StreamGuardConfig{Streams: list, Logger: log.Logger(), Observer: obs})
	attacks := map[string]func(c *jetstream.StreamConfig){
		"republish": func(c *jetstream.StreamConfig) {
			c.RePublish = &jetstream.RePublish{Source: ">", Destination: "stolen.>"}
		},
		"sources": func(c *jetstream.StreamConfig) {
			c.Sources = []*jetstream.StreamSource{{Name: "SCRATCH"}}
		},
		"subjects":         func(c *jetstream.StreamConfig) { c.Subjects = append(c.Subjects, "captured.>") },
		"max_msgs":         func(c *jetstream.StreamConfig) { c.MaxMsgs = 1 },
		"max_bytes":        func(c *jetstream.StreamConfig) { c.MaxBytes = 1024 },
		"max_age":          func(c *jetstream.StreamConfig) { c.MaxAge = 2 * time.Second },
		"duplicate_window": func(c *jetstream.StreamConfig) { c.Duplicates = time.Second },
		"allow_direct":     func(c *jetstream.StreamConfig) { c.AllowDirect = !c.AllowDirect },
	}
	for _, fs := range list {
		for field, attack := range attacks {
			want := fs.Config
			bad := fs.Config
			bad.Subjects = slices.Clone(bad.Subjects)
			attack(&bad)
			if field == "max_age" && bad.MaxAge < bad.Duplicates {
				bad.Duplicates = bad.MaxAge
			}
			if _, err := js.UpdateStream(bustest.Ctx(t), bad); err != nil {
				t.Fatalf("%s: rewriting %s: %v", fs.Config.Name, field, err)
			}
			err := g.Check(bustest.Ctx(t))
			var de *natsbus.DriftError
			if !errors.As(err, &de) || !slices.Contains(de.Drifts, natsbus.Drift{Stream: want.Name, Field: field}) {
				t.Fatalf("%s %s: check = %v, want a drift naming it", want.Name, field, err)
			}
			if g.Err() == nil {
				t.Fatalf("%s %s: Err() nil after a drift", want.Name, field)
			}
			if !log.Contains(`"stream":"`+want.Name+`"`) || !log.Contains(`"field":"`+field+`"`) {
				t.Fatalf("%s %s: no error line naming the stream and field:\n%s", want.Name, field, log.String())
			}
			if _, err := natsbus.ProvisionStreams(bustest.Ctx(t), js, []natsbus.FleetStream{fs}); err != nil {
				t.Fatalf("%s: restoring: %v", want.Name, err)
			}
			if err := g.Check(bustest.Ctx(t)); err != nil {
				t.Fatalf("%s %s: after provision: %v", want.Name, field, err)
			}
			if err := g.Wait(bustest.Ctx(t)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if obs.drifts == 0 || obs.clean == 0 {
		t.Errorf("observer saw %d drifted and %d clean checks", obs.drifts, obs.clean)
	}

	// A deleted stream is missing.
	if err := js.DeleteStream(bustest.Ctx(t), s.ResultsStream()); err != nil {
		t.Fatal(err)
	}
	var de *natsbus.DriftError
	if err := g.Check(bustest.Ctx(t)); !errors.As(err, &de) || !slices.Contains(de.Drifts, natsbus.Drift{Stream: s.ResultsStream(), Field: natsbus.FieldMissing}) {
		t.Fatalf("check after delete = %v, want %s missing", err, s.ResultsStream())
	}
}

type recordingObserver struct{ drifts, clean int }

func (o *recordingObserver) StreamsChecked(_ []string, d []natsbus.Drift) {
	if len(d) == 0 {
		o.clean++
	} else {
		o.drifts++
	}
}

// TestEachAudienceGuardsItsStreams: the guard of each audience (a
// coordinator, a serving coordinator, a worker) reports missing exactly
// the streams its role uses on an empty server; Setup without provision
// creates them and no other, after which the check passes; it changes no
// stream that differs, and Setup with provision restores it.
func TestEachAudienceGuardsItsStreams(t *testing.T) {
	s := protocol.Subjects{}
	streams := natsbus.StreamConfig{RunResultTTL: time.Hour}
	for _, tc := range []struct {
		name  string
		role  natsbus.Role
		guard func(jetstream.JetStream) *natsbus.StreamGuard
	}{
		{"coordinator", natsbus.RoleCoordinator, func(js jetstream.JetStream) *natsbus.StreamGuard {
			return natsbus.NewCoordinatorGuard(js, s, natsbus.StreamGuardConfig{})
		}},
		{"serve", natsbus.RoleServe, func(js jetstream.JetStream) *natsbus.StreamGuard {
			return natsbus.NewServeGuard(js, s, streams, natsbus.StreamGuardConfig{})
		}},
		{"worker", natsbus.RoleWorker, func(js jetstream.JetStream) *natsbus.StreamGuard {
			return natsbus.NewWorkerGuard(js, s, streams, natsbus.StreamGuardConfig{})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			js, err := jetstream.New(natstest.Connect(t, natstest.Start(t)))
			if err != nil {
				t.Fatal(err)
			}
			cfg := streams
			if tc.role == natsbus.RoleCoordinator {
				cfg = natsbus.StreamConfig{}
			}
			var want []string
			for _, fs := range natsbus.StreamsOf(natsbus.FleetStreams(s, cfg), tc.role) {
				want = append(want, fs.Config.Name)
			}
			g := tc.guard(js)
			var drift *natsbus.DriftError
			if err := g.Check(bustest.Ctx(t)); !errors.As(err, &drift) {
				t.Fatalf("check on an empty server: %v, want a *DriftError", err)
			}
			var missing []string
			for _, d := range drift.Drifts {
				if d.Field != natsbus.FieldMissing {
					t.Errorf("drift %v on an empty server, want only missing streams", d)
				}
				missing = append(missing, d.Stream)
			}
			if !slices.Equal(missing, want) {
				t.Fatalf("missing %v, want the %s streams %v", missing, tc.name, want)
			}
			if err := g.Setup(bustest.Ctx(t), false); err != nil {
				t.Fatal(err)
			}
			if err := g.Check(bustest.Ctx(t)); err != nil {
				t.Fatalf("check after Setup: %v", err)
			}
			names := js.StreamNames(bustest.Ctx(t))
			for name := range names.Name() {
				if !slices.Contains(want, name) {
					t.Errorf("Setup created %s, not a stream of the %s", name, tc.name)
				}
			}
			if err := names.Err(); err != nil {
				t.Fatal(err)
			}
			// A rewritten stream: Setup without provision changes none,
			// with provision restores it.
			first := g.Streams()[0].Config
			bad := first
			bad.MaxMsgs = 1
			if _, err := js.UpdateStream(bustest.Ctx(t), bad); err != nil {
				t.Fatal(err)
			}
			if err := g.Setup(bustest.Ctx(t), false); err != nil {
				t.Fatal(err)
			}
			if err := g.Check(bustest.Ctx(t)); !errors.As(err, &drift) || !slices.Contains(drift.Drifts, natsbus.Drift{Stream: first.Name, Field: "max_msgs"}) {
				t.Fatalf("check after Setup without provision of a rewritten %s: %v, want its max_msgs drift", first.Name, err)
			}
			if err := g.Setup(bustest.Ctx(t), true); err != nil {
				t.Fatal(err)
			}
			if err := g.Check(bustest.Ctx(t)); err != nil {
				t.Fatalf("check after Setup with provision: %v", err)
			}
		})
	}
}
