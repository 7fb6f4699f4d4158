package protocol

import (
	"strings"
	"unicode/utf8"
)

// TruncationMarker ends every output or observation that was cut short.
const TruncationMarker = "\n[truncated]"

// Truncate bounds s to at most max runes. A string that fits is returned as
// is. A longer one keeps its first max-len(marker) runes followed by
// [TruncationMarker]; when max is too small to hold the marker, it keeps the
// first max runes with no marker. It never splits a rune, and invalid UTF-8
// is replaced so the result is always valid UTF-8. The bool reports whether
// anything was cut.
func Truncate(s string, max int) (string, bool) {
	if max < 0 {
		max = 0
	}
	// Runes are counted as ranging over s reads them, an invalid byte as
	// one rune, which is what it becomes once replaced: s is made valid
	// after the cut, and only the part kept. A rune takes at most
	// utf8.UTFMax bytes, so a longer s has more than max runes and is not
	// counted to its end.
	if len(s) <= max || (len(s) <= utf8.UTFMax*max && utf8.RuneCountInString(s) <= max) {
		return validUTF8(s), false
	}
	keep, marker := max-utf8.RuneCountInString(TruncationMarker), TruncationMarker
	if keep < 0 {
		keep, marker = max, ""
	}
	i := 0
	for pos := range s {
		if i == keep {
			return validUTF8(s[:pos]) + marker, true
		}
		i++
	}
	return validUTF8(s) + marker, true // unreachable: s has more than max ≥ keep runes
}

// validUTF8 returns s if it is valid UTF-8, else toValidUTF8(s).
func validUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return toValidUTF8(s)
}

// toValidUTF8 replaces every invalid byte of s with U+FFFD, as ranging over
// s reads it.
func toValidUTF8(s string) string {
	var b strings.Builder
	b.Grow(len(s) + len(s)/2)
	for _, r := range s {
		b.WriteRune(r) // range yields U+FFFD for an invalid byte
	}
	return b.String()
}
