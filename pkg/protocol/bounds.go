package protocol

import "unicode/utf8"

// Bounds on a tool's output. Output is cut at most three times on its way
// to the model, each time by one bound with one definition:
//
//  1. The worker's harness cuts the tool's output to [OutputLimit]: the
//     call's MaxOutputChars, which the coordinator sets to its own
//     observation bound, within the worker's own bound (harness
//     Config.MaxOutputChars, default [DefaultMaxOutputChars]).
//  2. The worker cuts it further only when the encoded result would not
//     fit in one message ([EncodeResultWithin], bounded by the worker's
//     MaxMessageBytes, default [DefaultMaxMessageBytes]).
//  3. The coordinator bounds every tool message to its observation bound
//     (loop Config.MaxObservationChars, default
//     [DefaultMaxObservationChars]) whatever a worker sent, since a worker
//     may ignore step 1.
//
// Every cut uses [Truncate], so a cut text ends with [TruncationMarker].
const (
	// DefaultMaxObservationChars is the coordinator's default bound, in
	// runes, on each tool message the model reads, marker included. The
	// coordinator sends its bound as [Call].MaxOutputChars.
	DefaultMaxObservationChars = 12000
	// DefaultMaxOutputChars is a worker's default bound, in runes, on any
	// tool output. It is derived from the message size: an output of this
	// many runes always fits a result of [DefaultMaxMessageBytes]
	// ([MaxOutputCharsWithin]), so step 2 cuts only outputs a worker
	// configured past the default.
	DefaultMaxOutputChars = 100_000
)

// maxEncodedRuneBytes is the most bytes one rune of a string takes in
// JSON: a control character is escaped as \u00XX (U+2028 and U+2029 as
// \u2028, \u2029); any other rune is at most utf8.UTFMax bytes.
const maxEncodedRuneBytes = 6

// resultEnvelopeBytes bounds the encoded size of a [Result] without its
// output: valid ids and keys are at most 64 bytes, the worker name and
// error type are bounded by their producers, and the field names and
// numbers take a few hundred bytes.
const resultEnvelopeBytes = 4 << 10

// MaxOutputCharsWithin is the most runes of output a [Result] is sure to
// hold within messageBytes.
func MaxOutputCharsWithin(messageBytes int) int {
	return max(messageBytes-resultEnvelopeBytes, 0) / maxEncodedRuneBytes
}

// OutputLimit is the bound, in runes, on the output of one call: the
// call's asked bound (a [Call]'s MaxOutputChars; 0: none) within the
// worker's own, which always holds.
func OutputLimit(asked, own int) int {
	if asked > 0 && asked < own {
		return asked
	}
	return own
}

// EncodeResultWithin encodes r, cutting its output further (halving it,
// with [Truncate]) until the message fits in limit bytes, and marks r
// Truncated when it cut. A result that does not fit even with an empty
// output is [ErrTooLarge].
func EncodeResultWithin(r *Result, limit int) ([]byte, error) {
	for {
		data, err := encodeResult(r)
		if err != nil {
			return nil, err
		}
		if len(data) <= limit {
			return data, nil
		}
		if r.Output == "" {
			return nil, ErrTooLarge
		}
		r.Output, _ = Truncate(r.Output, utf8.RuneCountInString(r.Output)/2)
		r.Truncated = true
	}
}
