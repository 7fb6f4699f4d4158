package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	fastjson "github.com/segmentio/encoding/json"

	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// builtins are the tools [Builtins] knows, by name.
var builtins = map[string]func() Tool{
	"calculator": Calculator,
	"echo":       Echo,
}

// Builtins returns the built-in tools named (e.g. from --builtin
// calculator,echo). Names are trimmed and empty names skipped; an unknown or
// repeated name is an error.
func Builtins(names []string) ([]Tool, error) {
	var tools []Tool
	seen := make(map[string]bool, len(names))
	for _, n := range names {
		n = strings.TrimSpace(n)
		if n == "" {
			continue
		}
		mk, ok := builtins[n]
		if !ok {
			return nil, fmt.Errorf("builtin %q: unknown (known: %s)", clip(n), strings.Join(BuiltinNames(), ", "))
		}
		if seen[n] {
			return nil, fmt.Errorf("builtin %q: named twice", n)
		}
		seen[n] = true
		tools = append(tools, mk())
	}
	return tools, nil
}

// BuiltinNames lists the built-in tools, sorted.
func BuiltinNames() []string {
	names := make([]string, 0, len(builtins))
	for n := range builtins {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// echoParameters is the echo tool's closed schema.
const echoParameters = `{"type":"object","properties":{"text":{"type":"string","maxLength":100000,` +
	`"description":"The text to return."}},"required":["text"],"additionalProperties":false}`

// Echo returns the built-in echo tool, which returns its "text" argument.
func Echo() Tool {
	return Tool{
		Name:        "echo",
		Description: "Return the given text unchanged.",
		Parameters:  json.RawMessage(echoParameters),
		Timeout:     5 * time.Second,
		Idempotent:  true,
		ReadOnly:    true,
		Run: func(_ context.Context, args json.RawMessage) (string, error) {
			var in struct {
				Text *string `json:"text"`
			}
			if err := fastjson.Unmarshal(args, &in); err != nil || in.Text == nil {
				return "", errEchoArguments
			}
			return *in.Text, nil
		},
	}
}

// errEchoArguments is returned by echo when run without a "text" string
// (only possible when called directly, not through Execute).
var errEchoArguments = errors.New(`echo: arguments must be {"text": string}`)

// clip bounds s for an error message.
func clip(s string) string {
	s, _ = protocol.Truncate(s, 64)
	return s
}
