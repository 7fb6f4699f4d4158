package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

func TestParseUntil(t *testing.T) {
	now := time.Date(2026, 12, 4, 18, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Time{
		"30m":                  now.Add(30 * time.Minute),
		"2026-12-05T09:00:00Z": time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC),
		"2026-12-05 09:00:00":  time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC),
	} {
		if got, err := parseUntil(in, now); err != nil || !got.Equal(want) {
			t.Errorf("parseUntil(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "-5m", "0s", "tomorrow", "2026-13-01T00:00:00Z"} {
		if _, err := parseUntil(in, now); err == nil {
			t.Errorf("parseUntil(%q) accepted", in)
		}
	}
}

// TestToolsUsage: bad usage of "coordinator tools" exits 2 before any
// connection is made.
func TestToolsUsage(t *testing.T) {
	conn := func(context.Context) (*nats.Conn, error) { return nil, errors.New("must not connect") }
	for _, args := range [][]string{
		{},
		{"explode"},
		{"pause"},
		{"pause", "a.b"},
		{"pause", "echo", "--until", "-1m"},
		{"pause", "echo", "--reason", strings.Repeat("x", 501)},
		{"limit", "echo"},
		{"limit", "echo", "--rate", "-2"},
		{"limit", "echo", "--rate", "5", "--burst", "-1"},
		{"resume", "echo", "extra"},
		{"status"},
		{"status", "echo", "--timeout", "0s"},
		{"history", "--prefix", "a.b"},
	} {
		var out, errb bytes.Buffer
		if code := tools.run(t.Context(), args, &out, &errb, conn); code != exitUsage {
			t.Errorf("tools %q: exit %d, want 2\n%s", args, code, errb.String())
		}
	}
}
