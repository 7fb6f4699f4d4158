package loop_test

import (
	"errors"
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/loop/looptest"
)

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name      string
		cfg       loop.Config
		wantField string
		wantMsg   string
	}{
		{"zero value is the defaults", loop.Config{}, "", ""},
		{"explicit values", loop.Config{MaxRounds: 1, MaxToolCallsPerRound: 1, MaxObservationChars: 1,
			ToolTimeout: time.Millisecond, ApprovalTimeout: time.Millisecond, RequireApproval: []string{"echo", "*"}}, "", ""},
		{"negative max_rounds", loop.Config{MaxRounds: -1}, "MaxRounds", "MaxRounds must be >= 1, got -1"},
		{"negative cap", loop.Config{MaxToolCallsPerRound: -1}, "MaxToolCallsPerRound", "MaxToolCallsPerRound must be >= 1, got -1"},
		{"negative observation bound", loop.Config{MaxObservationChars: -5}, "MaxObservationChars", "MaxObservationChars must be >= 1, got -5"},
		{"negative tool timeout", loop.Config{ToolTimeout: -time.Second}, "ToolTimeout", "ToolTimeout must be > 0, got -1s"},
		{"negative approval timeout", loop.Config{ApprovalTimeout: -time.Second}, "ApprovalTimeout", "ApprovalTimeout must be > 0, got -1s"},
		{"negative grace", loop.Config{Grace: -1}, "Grace", "Grace must be > 0, got -1ns"},
		{"negative cancel timeout", loop.Config{CancelTimeout: -1}, "CancelTimeout", "CancelTimeout must be > 0, got -1ns"},
		{"bad approval name", loop.Config{RequireApproval: []string{"a.b"}}, "RequireApproval", "RequireApproval must list tool names or *, got 'a.b'"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if tt.wantField == "" {
				if err != nil {
					t.Fatalf("Validate: %v, want nil", err)
				}
				if _, err := loop.New(tt.cfg, looptest.NewModel(), looptest.NewCatalog(), looptest.New(nil), nil); err != nil {
					t.Fatalf("New: %v", err)
				}
				return
			}
			var ce *loop.ConfigError
			if !errors.As(err, &ce) || ce.Field != tt.wantField || err.Error() != tt.wantMsg {
				t.Fatalf("Validate=%v, want %s: %q", err, tt.wantField, tt.wantMsg)
			}
			if !errors.Is(err, loop.ErrInvalidConfig) {
				t.Fatal("error does not wrap ErrInvalidConfig")
			}
			if r, err := loop.New(tt.cfg, looptest.NewModel(), looptest.NewCatalog(), looptest.New(nil), nil); r != nil || err == nil {
				t.Fatalf("New accepted a bad config")
			}
		})
	}
}

func TestNewRequiresDependencies(t *testing.T) {
	m, c, d := looptest.NewModel(), looptest.NewCatalog(), looptest.New(nil)
	tests := []struct {
		name  string
		model loop.Model
		cat   loop.Catalog
		disp  loop.Dispatcher
		field string
	}{
		{"model", nil, c, d, "model"},
		{"catalog", m, nil, d, "catalog"},
		{"dispatcher", m, c, nil, "dispatcher"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := loop.New(loop.Config{}, tt.model, tt.cat, tt.disp, nil)
			var ce *loop.ConfigError
			if !errors.As(err, &ce) || ce.Field != tt.field {
				t.Fatalf("New=%v, want a ConfigError for %s", err, tt.field)
			}
		})
	}
}
