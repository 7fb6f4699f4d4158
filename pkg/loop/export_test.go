package loop

import "time"

// Span attribute keys, for the tests of package loop_test.
const (
	AttrOperation     = attrOperation
	AttrToolName      = attrToolName
	AttrToolCallID    = attrToolCallID
	AttrToolArguments = attrToolArguments
	AttrCallKey       = attrCallKey
	AttrOutcome       = attrOutcome
)

// DecodeInput and EncodeInput are the journaled input's codec, for its fuzz
// test.
var (
	DecodeInput = decodeInput
	EncodeInput = encodeInput
)

// SetHeldModelWait sets how long entries held back wait for the model's
// response, and returns a function that restores it.
func SetHeldModelWait(d time.Duration) (restore func()) {
	old := heldModelWait
	heldModelWait = d
	return func() { heldModelWait = old }
}

// SetPublishedWait sets how long a round gathers before it journals its
// publish, and returns a function that restores it.
func SetPublishedWait(d time.Duration) (restore func()) {
	old := publishedWait
	publishedWait = d
	return func() { publishedWait = old }
}
