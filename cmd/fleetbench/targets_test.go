package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTargetsInDocs holds docs/BENCHMARKS.md's "The targets" table to the
// report's: every target the report prints is a row there, so the two
// cannot drift apart.
func TestTargetsInDocs(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "docs", "BENCHMARKS.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(data), "\n## The targets\n")
	if !ok {
		t.Fatal(`docs/BENCHMARKS.md has no "## The targets" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	for _, tg := range targets {
		if !strings.Contains(section, "| "+tg.text+" |") {
			t.Errorf("docs/BENCHMARKS.md's targets table lacks the row %q", tg.text)
		}
	}
}

// TestTargetVerdicts checks each direction of a limit, at and past it.
func TestTargetVerdicts(t *testing.T) {
	most := target{atMost: true, limit: 1.2}
	least := target{limit: 0.9}
	for _, c := range []struct {
		t     target
		ratio float64
		want  string
	}{
		{most, 1.2, "met"}, {most, 1.21, "NOT met"},
		{least, 0.9, "met"}, {least, 0.89, "NOT met"},
	} {
		if got := c.t.verdict(c.ratio); got != c.want {
			t.Errorf("limit %v (at most %v), ratio %v: %q, want %q", c.t.limit, c.t.atMost, c.ratio, got, c.want)
		}
	}
}
