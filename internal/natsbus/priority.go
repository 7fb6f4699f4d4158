package natsbus

import (
	"strings"

	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// toolCallsSubject is the wildcard of every call to tool, whatever its
// class and client, as discovery shows it: <prefix>.call.<tool>.>.
func ToolCallsSubject(s protocol.Subjects, tool protocol.ToolName) string {
	return strings.TrimSuffix(s.Calls(), ">") + string(tool) + ".>"
}
