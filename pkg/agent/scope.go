package agent

import (
	"context"
	"strings"

	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// Scope is the set of tools an agent may use: exact names and prefixes
// ("fs_*"), or every tool ("*").
type Scope struct {
	all      bool
	names    map[protocol.ToolName]bool
	prefixes []string
}

// NewScope compiles patterns (as validated by [Definition.Validate]); an
// entry that is neither a name, a prefix nor "*" matches nothing.
func NewScope(patterns []string) Scope {
	s := Scope{names: map[protocol.ToolName]bool{}}
	for _, p := range patterns {
		switch prefix, star := strings.CutSuffix(p, "*"); {
		case p == "*":
			s.all = true
		case star && protocol.ValidToken(prefix):
			s.prefixes = append(s.prefixes, prefix)
		case !star && protocol.ValidToken(p):
			s.names[protocol.ToolName(p)] = true
		}
	}
	return s
}

// Allows reports whether the scope holds tool.
func (s Scope) Allows(tool protocol.ToolName) bool {
	if s.all || s.names[tool] {
		return true
	}
	for _, p := range s.prefixes {
		if strings.HasPrefix(string(tool), p) {
			return true
		}
	}
	return false
}

// ScopedCatalog is a [loop.Catalog] that offers only the tools of its
// Scope. The loop reads the catalog every round and tells the model only
// of what it returns, and a call to any tool it did not return is answered
// unknown_tool and never dispatched: so the model of an agent can use no
// other tool, whatever it writes, and a tool that joins the catalog later
// is offered only if the scope matches it.
type ScopedCatalog struct {
	Catalog loop.Catalog
	Scope   Scope
}

// Tools returns the catalog's specs that the scope allows, in order.
func (c ScopedCatalog) Tools(ctx context.Context) ([]protocol.ToolSpec, error) {
	specs, err := c.Catalog.Tools(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]protocol.ToolSpec, 0, len(specs))
	for _, s := range specs {
		if c.Scope.Allows(s.Name) {
			out = append(out, s)
		}
	}
	return out, nil
}
