package runner_test

import (
	"errors"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/toolfleet/toolfleet/pkg/config"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/model/scripted"
	"github.com/toolfleet/toolfleet/pkg/runner"
)

func TestBadConfigIsAConfigError(t *testing.T) {
	m := scripted.Demo()
	unconnected := new(nats.Conn)
	for _, tc := range []struct {
		name, field string
		nc          *nats.Conn
		cfg         runner.Config
	}{
		{"nil connection", "Conn", nil, runner.Config{Model: m}},
		{"no model", "Model", unconnected, runner.Config{}},
		{"bad prefix", "Prefix", unconnected, runner.Config{Model: m, Prefix: "a.b"}},
		{"negative rounds", "Loop.MaxRounds", unconnected, runner.Config{Model: m, Loop: loop.Config{MaxRounds: -1}}},
		{"negative check interval", "StreamCheckInterval", unconnected, runner.Config{Model: m, StreamCheckInterval: -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := runner.New(t.Context(), tc.nc, tc.cfg)
			var ce config.Error
			if !errors.As(err, &ce) || ce.ConfigField() != tc.field {
				t.Fatalf("err = %v, want a config.Error of %s", err, tc.field)
			}
		})
	}
}
