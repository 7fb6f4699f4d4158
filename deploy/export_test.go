package deploy

import (
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// OtherToolsFleet is otherToolsFleet for the tests of package deploy_test,
// which start servers of their own (the hub of cluster/nats-server.conf):
// connect connects to the fleet as a user.
func OtherToolsFleet(t *testing.T, connect func(user string) (*nats.Conn, jetstream.JetStream)) func(tool protocol.ToolName) protocol.Result {
	return otherToolsFleet(t, func(user string) client {
		nc, js := connect(user)
		return client{nc, js}
	})
}
