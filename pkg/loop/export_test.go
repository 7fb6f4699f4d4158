package loop

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
