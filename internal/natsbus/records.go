package natsbus

import (
	"github.com/nats-io/nats.go/jetstream"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// ownStartsStream is the expected configuration of a tool's own starts
// stream: the shared one's, on the tool's own subjects.
func ownStartsStream(s protocol.Subjects, tool protocol.ToolName, c StreamConfig) jetstream.StreamConfig {
	cfg := startsStream(s, c)
	cfg.Name = s.OwnStartsStream(tool)
	cfg.Subjects = []string{s.OwnStarts(tool)}
	return cfg
}
