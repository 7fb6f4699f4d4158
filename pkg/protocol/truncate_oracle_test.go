package protocol

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// truncateOracle is Truncate as first written: count every rune, then cut.
// Truncate must give the same answer on every input.
func truncateOracle(s string, max int) (string, bool) {
	if max < 0 {
		max = 0
	}
	if !utf8.ValidString(s) {
		out := make([]rune, 0, len(s))
		for _, r := range s {
			out = append(out, r)
		}
		s = string(out)
	}
	if len(s) <= max {
		return s, false
	}
	n := utf8.RuneCountInString(s)
	if n <= max {
		return s, false
	}
	markerRunes := utf8.RuneCountInString(TruncationMarker)
	keep, marker := max-markerRunes, TruncationMarker
	if keep < 0 {
		keep, marker = max, ""
	}
	i := 0
	for pos := range s {
		if i == keep {
			return s[:pos] + marker, true
		}
		i++
	}
	return s + marker, true
}

func TestTruncateMatchesOracle(t *testing.T) {
	for _, s := range []string{"", "a", "hello", strings.Repeat("é", 20), "x\xffy\xfe", strings.Repeat("日本", 10) + "\xff"} {
		for max := -1; max <= 45; max++ {
			got, gotCut := Truncate(s, max)
			want, wantCut := truncateOracle(s, max)
			if got != want || gotCut != wantCut {
				t.Fatalf("Truncate(%q, %d) = %q, %v; oracle %q, %v", s, max, got, gotCut, want, wantCut)
			}
		}
	}
}

// FuzzTruncateOracle checks Truncate against truncateOracle.
func FuzzTruncateOracle(f *testing.F) {
	f.Add("hello world", 5)
	f.Add(strings.Repeat("é", 40), 13)
	f.Add("\xff\xfe\xfd abc", 2)
	f.Add("exactly twelve", 14)
	f.Fuzz(func(t *testing.T, s string, max int) {
		if max > 1<<20 {
			max = 1 << 20
		}
		got, gotCut := Truncate(s, max)
		want, wantCut := truncateOracle(s, max)
		if got != want || gotCut != wantCut {
			t.Fatalf("Truncate(%q, %d) = %q, %v; oracle %q, %v", s, max, got, gotCut, want, wantCut)
		}
	})
}
