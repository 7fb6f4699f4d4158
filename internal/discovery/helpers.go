package discovery

import (
	"errors"
	"regexp"

	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// workerNameRE is the rule of a worker's name (natsbus.WorkerConfig.Name).
var workerNameRE = regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}$`)

// prefixOf is the subject prefix s uses.
func prefixOf(s protocol.Subjects) string {
	if s.Prefix == "" {
		return protocol.DefaultPrefix
	}
	return s.Prefix
}

// clipKey bounds an identifier taken from the network for logs and
// reports.
func clipKey(k string) string {
	if len(k) > 64 {
		return k[:64] + "…"
	}
	return k
}

// errorCode is err's protocol code, or "internal".
func errorCode(err error) string {
	var pe *protocol.Error
	if errors.As(err, &pe) {
		return pe.Code
	}
	return "internal"
}
