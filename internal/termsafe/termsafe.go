// Package termsafe makes untrusted text (what a model or a tool wrote, an
// approver's name) safe to print on a terminal: no control sequence (OSC 52
// clipboard writes, CSI cursor movement, C0 and C1 controls) and no
// formatting rune (bidirectional overrides, zero-width characters) reaches
// it, so nothing printed can hide, reorder or rewrite what is on screen.
package termsafe

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// Line makes s safe to print on one terminal line: every rune that is not
// printable or is a formatting character becomes U+FFFD, and it is clipped
// to max runes (an ellipsis marks the cut); max <= 0 means no clipping.
func Line(s string, max int) string {
	var b strings.Builder
	b.Grow(len(s))
	n := 0
	for _, r := range s {
		if max > 0 && n == max {
			b.WriteString("…")
			break
		}
		if !safe(r) {
			r = utf8.RuneError
		}
		b.WriteRune(r)
		n++
	}
	return b.String()
}

// Text is [Line] for text of several lines: newlines and tabs are kept,
// every other unsafe rune becomes U+FFFD. It never clips.
func Text(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		if r != '\n' && r != '\t' && !safe(r) {
			r = utf8.RuneError
		}
		b.WriteRune(r)
	}
	return b.String()
}

// safe reports whether r prints as itself: printable, and not a formatting
// character. Invalid UTF-8 decodes to U+FFFD, which is safe.
func safe(r rune) bool { return unicode.IsPrint(r) && !unicode.Is(unicode.Cf, r) }
