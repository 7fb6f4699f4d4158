package loop

import (
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"
)

func TestFmtDuration(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want string
	}{
		{2 * time.Minute, "2m"},
		{90 * time.Minute, "1h30m"},
		{time.Hour, "1h"},
		{30 * time.Second, "30s"},
		{1500 * time.Millisecond, "1.5s"},
		{50 * time.Millisecond, "50ms"},
		{2*time.Minute + 3*time.Second, "2m3s"},
	}
	for _, tt := range tests {
		if got := fmtDuration(tt.d); got != tt.want {
			t.Errorf("fmtDuration(%v)=%q, want %q", tt.d, got, tt.want)
		}
	}
}

// FuzzClipName checks that any model-written name becomes safe to quote:
// valid UTF-8, no control or invisible runes, no bare quote or backslash
// escape ambiguity, bounded, and unchanged when it is a valid tool name.
func FuzzClipName(f *testing.F) {
	for _, s := range []string{"echo", "", "a'b", `a\b`, "a\x00b", "\xff", "a\u200bb", strings.Repeat("x", 200), "é"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := clipName(s)
		if validToolName(s) && got != s {
			t.Fatalf("clipName(%q)=%q, want it unchanged", s, got)
		}
		if !utf8.ValidString(got) {
			t.Fatalf("clipName(%q)=%q is not valid UTF-8", s, got)
		}
		for i, r := range got {
			if !unicode.IsPrint(r) {
				t.Fatalf("clipName(%q)=%q has non-printable %U", s, got, r)
			}
			if r == '\'' && (i == 0 || got[i-1] != '\\') {
				t.Fatalf("clipName(%q)=%q has an unescaped quote", s, got)
			}
		}
		// 64 runes, each escaped to at most 10 bytes, plus the ellipsis.
		if len(got) > 64*10+len("…") {
			t.Fatalf("clipName(%q) is %d bytes", s, len(got))
		}
	})
}
