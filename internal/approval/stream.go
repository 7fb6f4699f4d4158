package approval

import (
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// StreamConfig is the approvals stream: every subject under
// <prefix>.approval.>, limits retention, file storage, and neither message
// deletes nor purges (the server refuses an update that lifts either). It is
// the audit log of requests, decisions and outcome notes.
func StreamConfig(s protocol.Subjects) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        s.ApprovalsStream(),
		Description: "toolfleet approval requests, decisions and outcomes (audit log)",
		Subjects:    []string{s.Approvals()},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		DenyDelete:  true,
		DenyPurge:   true,
	}
}
