package cliconfig_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/toolfleet/toolfleet/internal/cliconfig"
	"github.com/toolfleet/toolfleet/pkg/config"
)

func TestDescribeNamesTheFlag(t *testing.T) {
	flags := cliconfig.Flags{"Loop.MaxRounds": "--max-rounds", "Conn": "--nats-url"}
	err := fmt.Errorf("open: %w", errors.Join(
		config.Prefix("Loop", config.Errorf("MaxRounds", "must be >= 1, got 0")),
		config.Prefix("Conn", config.Errorf("URL", "bad")),
		config.Errorf("Unmapped", "odd"),
	))
	got := flags.Describe(err)
	want := []string{"--max-rounds: must be >= 1, got 0", "--nats-url: bad", "Unmapped: odd"}
	if !slices.Equal(got, want) {
		t.Fatalf("Describe = %q, want %q", got, want)
	}
	if got := flags.Describe(errors.New("not a config error")); got != nil {
		t.Fatalf("Describe of a plain error = %q, want nil", got)
	}
}

func TestWithKeepsBothTables(t *testing.T) {
	f := cliconfig.Conn.With(cliconfig.Flags{"Workers": "--workers", "Prefix": "--subject-prefix"})
	if f.Flag("Workers") != "--workers" || f.Flag("Conn.CredsFile") != "--creds" || f.Flag("Prefix") != "--subject-prefix" {
		t.Fatalf("With: Workers %q, Conn.CredsFile %q, Prefix %q", f.Flag("Workers"), f.Flag("Conn.CredsFile"), f.Flag("Prefix"))
	}
	if cliconfig.Conn.Flag("Workers") != "Workers" || cliconfig.Conn.Flag("Prefix") != "--prefix" {
		t.Fatal("With changed the table it extends")
	}
}
