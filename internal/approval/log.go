package approval

import "github.com/toolfleet/toolfleet/pkg/logkey"

// Log keys. Logs carry ids, tool names, outcomes and reason codes; never
// arguments, reasons typed by operators, or decision payloads.
const (
	logRun      = logkey.RunID
	logKey      = logkey.CallKey
	logTool     = logkey.Tool
	logReason   = "reason"
	logOutcome  = logkey.Outcome
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
