package protocol

import (
	"regexp"
	"strings"
	"testing"
)

// tokenOracle is the pattern ValidToken implements by hand.
var tokenOracle = regexp.MustCompile(TokenPattern)

func TestValidTokenMatchesPattern(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    string
		want bool
	}{
		{"empty", "", false},
		{"one letter", "a", true},
		{"all classes", "Az09_-", true},
		{"64 bytes", strings.Repeat("x", 64), true},
		{"65 bytes", strings.Repeat("x", 65), false},
		{"dot", "a.b", false},
		{"wildcard", "*", false},
		{"tail wildcard", ">", false},
		{"space", "a b", false},
		{"trailing newline", "abc\n", false},
		{"non-ASCII letter", "é", false},
		{"NUL", "a\x00", false},
		{"NewID", NewID(), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ValidToken(tc.s); got != tc.want {
				t.Errorf("ValidToken(%q) = %v, want %v", tc.s, got, tc.want)
			}
			if got := tokenOracle.MatchString(tc.s); got != tc.want {
				t.Errorf("pattern matches %q = %v, want %v", tc.s, got, tc.want)
			}
		})
	}
}

// FuzzValidToken checks ValidToken, and the Parse functions of the id
// types built on it, against TokenPattern.
func FuzzValidToken(f *testing.F) {
	for _, s := range []string{"", "a", "fleet", "call_1-A", strings.Repeat("z", 64), strings.Repeat("z", 65), "a.b", "a\n", "é", "\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want := tokenOracle.MatchString(s)
		if got := ValidToken(s); got != want {
			t.Fatalf("ValidToken(%q) = %v, pattern says %v", s, got, want)
		}
		tool, err1 := ParseToolName(s)
		run, err2 := ParseRunID(s)
		key, err3 := ParseCallKey(s)
		for _, err := range []error{err1, err2, err3} {
			if (err == nil) != want {
				t.Fatalf("Parse(%q) err = %v, pattern says %v", s, err, want)
			}
		}
		if want && (string(tool) != s || string(run) != s || string(key) != s) {
			t.Fatalf("Parse(%q) changed the token", s)
		}
	})
}
