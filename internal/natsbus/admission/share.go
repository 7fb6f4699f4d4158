package admission

import (
	"errors"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// Route is the client and class a run's calls are published under.
type Route struct {
	// Client is the run's client: the <client> token of its submission.
	// Default: protocol.DefaultClient.
	Client string
	// Class is the run's priority class. Default: interactive.
	Class protocol.Class
}

// ShareObserver is told about calls held because their client's share of
// a tool was full. Its methods must not block.
type ShareObserver interface {
	// CallHeld: the calls stream refused a call of client for tool, which
	// is held until it takes it.
	CallHeld(tool protocol.ToolName, client string)
	// CallShareLimited: a held call's deadline came near first; it was
	// answered rate_limited and never published.
	CallShareLimited(tool protocol.ToolName, client string)
}

// OverShare reports whether err is the calls stream refusing a message
// because its subject holds max_msgs_per_subject already.
func OverShare(err error) bool {
	var api *jetstream.APIError
	return errors.As(err, &api) && api.ErrorCode == errCodeStoreFailed &&
		strings.Contains(api.Description, "per subject")
}

// errCodeStoreFailed is JetStream's "storing the message failed" (a
// limit of the stream refused it; the description says which).
const errCodeStoreFailed jetstream.ErrorCode = 10077
