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
