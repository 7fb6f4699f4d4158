package termsafe_test

import (
	"strings"
	"testing"
	"unicode"

	"github.com/toolfleet/toolfleet/internal/termsafe"
)

// Hostile text: an OSC 52 clipboard write, cursor movement, a bidi
// override, C1 controls, a zero-width joiner.
const hostile = "ok\x1b]52;c;ZWNobyBldmls\x07\x1b[2J\x1b[1;1H\u202egnp.exe\u202c\u009b31m\u200dend\r\x00"

func TestNothingUnsafeSurvives(t *testing.T) {
	for name, got := range map[string]string{"Line": termsafe.Line(hostile, 0), "Text": termsafe.Text(hostile + "\nsecond\tline")} {
		for _, r := range got {
			if r == '\n' || r == '\t' {
				if name == "Line" {
					t.Errorf("Line kept %q", r)
				}
				continue
			}
			if !unicode.IsPrint(r) || unicode.Is(unicode.Cf, r) {
				t.Errorf("%s kept %U in %q", name, r, got)
			}
		}
		if !strings.HasPrefix(got, "ok") || !strings.Contains(got, "end") {
			t.Errorf("%s lost the printable text: %q", name, got)
		}
	}
	if got := termsafe.Text("a\nb\tc"); got != "a\nb\tc" {
		t.Errorf("Text(%q) = %q", "a\nb\tc", got)
	}
	if got := termsafe.Line("abcdef", 3); got != "abc…" {
		t.Errorf("Line clipped = %q", got)
	}
}

func FuzzText(f *testing.F) {
	f.Add(hostile)
	f.Fuzz(func(t *testing.T, s string) {
		for _, r := range termsafe.Text(s) {
			if r != '\n' && r != '\t' && (!unicode.IsPrint(r) || unicode.Is(unicode.Cf, r)) {
				t.Fatalf("Text kept %U", r)
			}
		}
		for _, r := range termsafe.Line(s, 10) {
			if !unicode.IsPrint(r) || unicode.Is(unicode.Cf, r) {
				t.Fatalf("Line kept %U", r)
			}
		}
	})
}
