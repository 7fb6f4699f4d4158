package approval

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/toolfleet/toolfleet/internal/termsafe"
)

// displayJSON makes JSON text safe to print on an operator's terminal
// without changing what it means: every rune that is not printable or is a
// formatting character (bidirectional overrides, zero-width joiners, ...) is
// written as a \uXXXX escape, which is valid inside a JSON string, the only
// place such runes can occur in valid JSON. Control characters are escaped
// by the JSON encoder already. What the operator reads is therefore exactly
// what the tool receives, with nothing hidden or reordered.
func displayJSON(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		i += size
		switch {
		case r == utf8.RuneError && size <= 1:
			b.WriteString(`\ufffd`)
		case r < 0x80 && r >= 0x20 && r != 0x7f:
			b.WriteRune(r)
		case r >= 0x80 && unicode.IsPrint(r) && !unicode.Is(unicode.Cf, r):
			b.WriteRune(r)
		case r > 0xFFFF:
			r1, r2 := utf16Surrogates(r)
			fmt.Fprintf(&b, `\u%04x\u%04x`, r1, r2)
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
	}
	return b.String()
}

func utf16Surrogates(r rune) (rune, rune) {
	r -= 0x10000
	return 0xD800 + (r>>10)&0x3FF, 0xDC00 + r&0x3FF
}

// displayText makes free text (a call id, an approver, a reason) safe to
// print on one terminal line: non-printable and formatting runes become
// U+FFFD, and it is clipped to max runes.
func displayText(s string, max int) string { return termsafe.Line(s, max) }
