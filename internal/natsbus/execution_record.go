package natsbus

import (
	"time"
)

// MaxApprovalMaxAge bounds WorkerConfig.ApprovalMaxAge: an approved call's
// execution record (ClaimsMaxAge) must outlive every call its approval
// admits.
const MaxApprovalMaxAge = 24 * time.Hour
