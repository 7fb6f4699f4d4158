package approval

// Log keys. Logs carry ids, tool names, outcomes and reason codes; never
// arguments, reasons typed by operators, or decision payloads.
const (
	logRun      = "run_id"
	logKey      = "call_key"
	logTool     = "tool"
	logReason   = "reason"
	logOutcome  = "outcome"
	logApprover = "approver"
	logWaited   = "waited"
)

// Reason codes for ignored decisions.
const (
	ignoreTooLarge  = "too_large"
	ignoreMalformed = "malformed"
	ignoreDigest    = "digest_mismatch"
	ignoreLate      = "late"
)
