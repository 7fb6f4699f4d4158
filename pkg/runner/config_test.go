package runner_test

import (
	"errors"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/toolfleet/toolfleet/pkg/agent"
	"github.com/toolfleet/toolfleet/pkg/config"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/model/anthropic"
	"github.com/toolfleet/toolfleet/pkg/model/openai"
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

// TestAgentWithAnotherModelRefused: an agent whose definition names
// openai gpt-4.1-mini, given an openai client of another model or an
// anthropic client, is refused before any I/O, naming the field Model.
func TestAgentWithAnotherModelRefused(t *testing.T) {
	def, err := agent.Parse([]byte(`{"name":"a","model":{"provider":"openai","name":"gpt-4.1-mini"}}`))
	if err != nil {
		t.Fatal(err)
	}
	other, err := openai.New(openai.Config{Model: "gpt-4o", APIKey: "k"})
	if err != nil {
		t.Fatal(err)
	}
	claude, err := anthropic.New(anthropic.Config{Model: "gpt-4.1-mini", APIKey: "k"})
	if err != nil {
		t.Fatal(err)
	}
	for name, m := range map[string]loop.Model{"another model": other, "another provider": claude} {
		t.Run(name, func(t *testing.T) {
			_, err := runner.New(t.Context(), new(nats.Conn), runner.Config{Model: m, Agent: &def})
			var ce config.Error
			if !errors.As(err, &ce) || ce.ConfigField() != "Model" || !errors.Is(err, agent.ErrModelMismatch) {
				t.Fatalf("err = %v, want a config.Error of Model wrapping agent.ErrModelMismatch", err)
			}
		})
	}
}
