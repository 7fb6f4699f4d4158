package agent_test

import (
	"errors"
	"testing"

	"github.com/toolfleet/toolfleet/pkg/agent"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/loop/looptest"
	"github.com/toolfleet/toolfleet/pkg/model/anthropic"
	"github.com/toolfleet/toolfleet/pkg/model/openai"
	"github.com/toolfleet/toolfleet/pkg/model/providers"
	"github.com/toolfleet/toolfleet/pkg/model/responses"
)

// TestModelMatch: the client providers.Models builds from a definition
// matches it; a client of another provider or model does not; a client
// that does not describe itself is accepted.
func TestModelMatch(t *testing.T) {
	mustModel := func(doc string) agent.Model {
		t.Helper()
		d, err := agent.Parse([]byte(`{"name":"a","model":` + doc + `}`))
		if err != nil {
			t.Fatal(err)
		}
		return d.Model
	}
	must := func(m loop.Model, err error) loop.Model {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	built := &providers.Models{Getenv: func(string) string { return "k" }}
	for _, tc := range []struct {
		name   string
		model  agent.Model
		client loop.Model
		match  bool
	}{
		{"openai built", mustModel(`{"provider":"openai","name":"gpt-4.1-mini"}`), nil, true},
		{"responses built", mustModel(`{"provider":"openai-responses","name":"gpt-4.1-mini"}`), nil, true},
		{"anthropic built", mustModel(`{"provider":"anthropic","name":"claude-sonnet-4-5"}`), nil, true},
		{"responses client for openai-responses", mustModel(`{"provider":"openai-responses","name":"gpt-4.1"}`),
			must(responses.New(responses.Config{Model: "gpt-4.1", APIKey: "k"})), true},
		{"another model", mustModel(`{"provider":"openai","name":"gpt-4.1-mini"}`),
			must(openai.New(openai.Config{Model: "gpt-4o", APIKey: "k"})), false},
		{"another provider", mustModel(`{"provider":"openai","name":"claude-sonnet-4-5"}`),
			must(anthropic.New(anthropic.Config{Model: "claude-sonnet-4-5", APIKey: "k"})), false},
		{"undescribed", mustModel(`{"provider":"openai","name":"gpt-4.1-mini"}`), looptest.NewModel(looptest.Answer("x")), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := tc.client
			if client == nil {
				client = must(built.Model(tc.model))
			}
			err := tc.model.Match(client)
			if got := err == nil; got != tc.match {
				t.Fatalf("Match = %v, want match %v", err, tc.match)
			}
			if err != nil && !errors.Is(err, agent.ErrModelMismatch) {
				t.Fatalf("%v does not wrap ErrModelMismatch", err)
			}
		})
	}
}
