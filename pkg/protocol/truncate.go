package protocol

import "unicode/utf8"

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
	if !utf8.ValidString(s) {
		s = toValidUTF8(s)
	}
	if len(s) <= max { // bytes ≥ runes, so it fits
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

func toValidUTF8(s string) string {
	out := make([]rune, 0, len(s))
	for _, r := range s {
		out = append(out, r) // range yields U+FFFD for invalid bytes
	}
	return string(out)
}
