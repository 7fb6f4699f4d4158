package mcptool

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/logkey"
	"github.com/toolfleet/toolfleet/pkg/protocol"
	"github.com/toolfleet/toolfleet/pkg/schema"
)

// maxDescriptionLen bounds a tool's description, as the manifest does.
const maxDescriptionLen = 8 << 10

// toolEntry is one tool of the server as the fleet serves it.
type toolEntry struct {
	fleetName string
	mcpName   string
	desc      string
	params    json.RawMessage
	output    *schema.Schema // nil: no outputSchema
	outRaw    json.RawMessage
	idem      bool
	approval  bool
	timeout   int64 // ms, for comparisons
	tool      *mcp.Tool
}

var unsafeNameRE = regexp.MustCompile(`[^A-Za-z0-9_-]`)

// list lists the server's tools and converts them. strict (at start): a
// tool that cannot be served is an error; otherwise it is skipped and
// logged.
func (s *Server) list(ctx context.Context, sess *session, strict bool) ([]*toolEntry, error) {
	var out []*toolEntry
	seen := map[string]string{}
	for t, err := range sess.cs.Tools(ctx, nil) {
		if err != nil {
			return nil, fmt.Errorf("tools/list: %w", err)
		}
		if len(out) >= MaxTools {
			s.log.Warn().Int("max", MaxTools).Msg("mcp server lists more tools than served: the rest are skipped")
			break
		}
		if len(s.cfg.Allow) > 0 && !slices.Contains(s.cfg.Allow, t.Name) {
			continue
		}
		e, err := s.convert(t)
		if err == nil {
			if other, dup := seen[e.fleetName]; dup {
				err = fmt.Errorf("its fleet name %q is also the name of tool %q", e.fleetName, clip(other))
			}
		}
		if err != nil {
			if strict {
				return nil, &ConfigError{Index: -1, Server: s.cfg.Name, Field: "tools", Err: fmt.Errorf("tool %q: %w", clip(t.Name), err)}
			}
			s.log.Error().Str(logkey.Tool, clip(t.Name)).Str("error", err.Error()).Msg("mcp tool skipped")
			continue
		}
		seen[e.fleetName] = t.Name
		out = append(out, e)
	}
	return out, nil
}

func (s *Server) convert(t *mcp.Tool) (*toolEntry, error) {
	name := unsafeNameRE.ReplaceAllString(t.Name, "_")
	fleet := *s.cfg.Prefix + name
	if t.Name == "" || !protocol.ValidToken(fleet) {
		return nil, errors.New("the name (with the prefix) must match " + protocol.TokenPattern)
	}
	params, err := json.Marshal(t.InputSchema)
	if err != nil || bytes.Equal(params, []byte("null")) {
		params = []byte(`{"type":"object"}`)
	}
	if _, err := schema.Compile(fleet, params); err != nil {
		return nil, fmt.Errorf("inputSchema does not compile: %w", err)
	}
	e := &toolEntry{fleetName: fleet, mcpName: t.Name, params: params, tool: t}
	e.desc = t.Description
	if len(e.desc) > maxDescriptionLen {
		e.desc, _ = protocol.Truncate(e.desc, maxDescriptionLen/4)
	}
	if t.OutputSchema != nil {
		raw, err := json.Marshal(t.OutputSchema)
		if err != nil {
			return nil, fmt.Errorf("outputSchema: %w", err)
		}
		if e.output, err = schema.Compile(fleet+"-output", raw); err != nil {
			return nil, fmt.Errorf("outputSchema does not compile: %w", err)
		}
		e.outRaw = raw
	}
	// Annotations come from the MCP server, which the specification calls
	// untrusted: they may only raise caution, never lower it. A tool is
	// non-idempotent (claimed before it runs, never run twice) and
	// approval-gated unless the manifest, written by the operator, says
	// otherwise; no annotation can make it idempotent or ungated
	// (readOnlyHint, idempotentHint and destructiveHint: false are
	// ignored, and destructiveHint: true is what the tool is already
	// treated as).
	e.idem, e.approval = false, true
	if v := s.cfg.Idempotent; v != nil {
		e.idem = *v
	}
	if v := s.cfg.RequiresApproval; v != nil {
		e.approval = *v
	}
	timeout := s.cfg.Timeout
	if o, ok := s.cfg.Tools[t.Name]; ok {
		if o.Idempotent != nil {
			e.idem = *o.Idempotent
		}
		if o.RequiresApproval != nil {
			e.approval = *o.RequiresApproval
		}
		if o.Timeout > 0 {
			timeout = o.Timeout
		}
	}
	e.timeout = timeout.Milliseconds()
	return e, nil
}

// sameTools reports whether two lists serve the same tools alike.
func sameTools(a, b []*toolEntry) bool {
	return slices.EqualFunc(a, b, func(x, y *toolEntry) bool {
		return x.fleetName == y.fleetName && x.mcpName == y.mcpName && x.desc == y.desc &&
			bytes.Equal(x.params, y.params) && bytes.Equal(x.outRaw, y.outRaw) &&
			x.idem == y.idem && x.approval == y.approval && x.timeout == y.timeout
	})
}

// ToolCount is the number of the server's tools the fleet serves now (0
// while it lists none, or none it may serve).
func (s *Server) ToolCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.tools)
}

// Tools returns the server's current tools as harness tools.
func (s *Server) Tools() []harness.Tool {
	s.mu.Lock()
	entries := slices.Clone(s.tools)
	s.mu.Unlock()
	out := make([]harness.Tool, 0, len(entries))
	for _, e := range entries {
		out = append(out, harness.Tool{
			Name:             e.fleetName,
			Description:      e.desc,
			Parameters:       slices.Clone(e.params),
			Timeout:          msDur(e.timeout),
			Idempotent:       e.idem,
			RequiresApproval: e.approval,
			Run: func(ctx context.Context, args json.RawMessage) (string, error) {
				return s.call(ctx, e, args)
			},
		})
	}
	return out
}
