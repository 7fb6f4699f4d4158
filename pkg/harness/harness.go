package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/toolfleet/toolfleet/pkg/protocol"
	"github.com/toolfleet/toolfleet/pkg/schema"
)

// DefaultTimeout is a tool's timeout when it declares none: the fleet's
// [protocol.DefaultToolTimeout].
const DefaultTimeout = protocol.DefaultToolTimeout

// Func is a Go-native tool body. args is the validated JSON object. It must
// honour ctx: see the package's Caveats.
type Func func(ctx context.Context, args json.RawMessage) (string, error)

// Tool is one tool a [Harness] can run.
type Tool struct {
	// Name must match [protocol.TokenPattern].
	Name        string
	Description string
	// Parameters is the JSON Schema (draft 2020-12) of the arguments, compiled
	// once by [New]. It must describe an object. Empty: {"type":"object"}.
	Parameters json.RawMessage
	// Timeout is the tool's own timeout. 0: [DefaultTimeout].
	Timeout time.Duration
	// Idempotent tools may be run again after a worker crash.
	Idempotent bool
	// ReadOnly tools change nothing: a dry run runs them, and answers
	// every other tool's call simulated.
	ReadOnly bool
	// RequiresApproval tools run only after an operator approves each call.
	RequiresApproval bool
	// RateLimit is the tool's fleet-wide rate limit, which the fleet's
	// workers enforce together (zero: none).
	RateLimit protocol.RateLimit
	// Run is the tool's body. Tools from a manifest have a Run that executes
	// their command; [Harness.Execute] runs the command itself, with the
	// call's output bound.
	Run Func

	// cmd is set for exec tools (from a manifest).
	cmd *command
}

// defaultParameters is the schema of a tool that declares none.
var defaultParameters = json.RawMessage(`{"type":"object"}`)

// ToolError says which tool, and which of its fields, is wrong: in the
// arguments of [New] or in a manifest.
type ToolError struct {
	// Index is the tool's position (in the manifest's "tools" or in the
	// arguments of New), from 0.
	Index int
	// Tool is the tool's name, if it has one.
	Tool string
	// Field is the field at fault, as spelled in the manifest.
	Field string
	Err   error
}

func (e *ToolError) Error() string {
	where := fmt.Sprintf("tools[%d]", e.Index)
	if e.Tool != "" {
		where = fmt.Sprintf("tool %q (tools[%d])", e.Tool, e.Index)
	}
	if e.Field != "" {
		return fmt.Sprintf("%s: field %q: %v", where, e.Field, e.Err)
	}
	return fmt.Sprintf("%s: %v", where, e.Err)
}

func (e *ToolError) Unwrap() error { return e.Err }

// Harness runs tool calls. It is safe for concurrent use.
type Harness struct {
	cfg       Config
	tools     map[protocol.ToolName]*entry
	specs     []protocol.ToolSpec // sorted by name
	abandoned atomic.Int64
	// runners are the goroutines waiting to run a Go tool's call
	// (gotool.go).
	runners runners
	// escaped counts processes of exec tools found outside their tool's
	// process group and killed.
	escaped atomic.Int64
}

// entry is a tool with what New derived from it.
type entry struct {
	name    protocol.ToolName // tool.Name, validated
	tool    Tool
	timeout time.Duration // effective
	schema  *schema.Schema
}

// New returns a Harness that serves tools. It refuses an invalid config, an
// invalid or duplicate name, a schema that does not compile, a negative
// timeout and a nil Run, with an error naming the tool.
func New(cfg Config, tools ...Tool) (*Harness, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("harness: config: %w", err)
	}
	h := &Harness{cfg: cfg.withDefaults(), tools: make(map[protocol.ToolName]*entry, len(tools))}
	for i, t := range tools {
		e, err := newEntry(i, t)
		if err != nil {
			return nil, fmt.Errorf("harness: %w", err)
		}
		if _, dup := h.tools[e.name]; dup {
			return nil, fmt.Errorf("harness: %w", &ToolError{Index: i, Tool: t.Name, Field: "name", Err: errors.New("duplicate name")})
		}
		h.tools[e.name] = e
		digest, err := protocol.SchemaDigest(e.tool.Parameters)
		if err != nil { // cannot happen: the schema compiled
			return nil, fmt.Errorf("harness: %w", &ToolError{Index: i, Tool: t.Name, Field: "parameters", Err: err})
		}
		h.specs = append(h.specs, protocol.ToolSpec{
			V:                protocol.Version,
			Name:             e.name,
			Description:      t.Description,
			Parameters:       e.tool.Parameters,
			TimeoutMS:        e.timeout.Milliseconds(),
			Idempotent:       t.Idempotent,
			RequiresApproval: t.RequiresApproval,
			ReadOnly:         t.ReadOnly,
			SchemaDigest:     digest,
		})
	}
	slices.SortFunc(h.specs, func(a, b protocol.ToolSpec) int { return strings.Compare(string(a.Name), string(b.Name)) })
	return h, nil
}

func newEntry(i int, t Tool) (*entry, error) {
	terr := func(field string, err error) error {
		return &ToolError{Index: i, Tool: t.Name, Field: field, Err: err}
	}
	if t.Name == "" {
		return nil, terr("name", errors.New("required"))
	}
	name, err := protocol.ParseToolName(t.Name)
	if err != nil {
		// Do not echo an invalid name: it may be anything.
		return nil, &ToolError{Index: i, Field: "name", Err: errors.New("must match " + protocol.TokenPattern)}
	}
	if t.Run == nil {
		return nil, terr("run", errors.New("required"))
	}
	if err := t.RateLimit.Validate(); err != nil {
		return nil, terr("rate_limit", err)
	}
	if t.Timeout < 0 {
		return nil, terr("timeout", errors.New("must be > 0 (0: default 30s)"))
	}
	if len(t.Parameters) == 0 {
		t.Parameters = defaultParameters
	}
	t.Parameters = slices.Clone(t.Parameters)
	s, err := schema.Compile(t.Name, t.Parameters)
	if err != nil {
		return nil, terr("parameters", schemaError(t.Name, err))
	}
	timeout := t.Timeout
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	return &entry{name: name, tool: t, timeout: timeout, schema: s}, nil
}

// Specs returns the specs of the tools, sorted by name, for the catalog.
// TimeoutMS is each tool's effective timeout.
func (h *Harness) Specs() []protocol.ToolSpec {
	out := make([]protocol.ToolSpec, len(h.specs))
	for i, s := range h.specs {
		s.Parameters = slices.Clone(s.Parameters)
		out[i] = s
	}
	return out
}

// RateLimit returns the rate limit the tool called name declares (zero:
// none, or no such tool).
func (h *Harness) RateLimit(name protocol.ToolName) protocol.RateLimit {
	if e, ok := h.tools[name]; ok {
		return e.tool.RateLimit
	}
	return protocol.RateLimit{}
}

// Tool returns the tool called name.
func (h *Harness) Tool(name protocol.ToolName) (Tool, bool) {
	e, ok := h.tools[name]
	if !ok {
		return Tool{}, false
	}
	t := e.tool
	t.Parameters = slices.Clone(t.Parameters)
	return t, true
}

// Abandoned returns how many Go tools are still running after their call
// ended (timeout or cancel) because they ignored their context.
func (h *Harness) Abandoned() int { return int(h.abandoned.Load()) }

// Escaped counts the processes exec tools started that left the tool's
// process group (setsid, a double fork into another group) and that the
// supervisor found and killed; a call with any ends failed
// ("harness.EscapedProcessGroup"), never as a clean success. Always 0
// where there is no supervisor (outside Linux).
func (h *Harness) Escaped() int64 { return h.escaped.Load() }

// schemaError drops the tool name [schema.Compile] puts in front of its
// errors: a ToolError names the tool already.
func schemaError(name string, err error) error {
	msg, ok := strings.CutPrefix(err.Error(), fmt.Sprintf("schema of tool %q: ", name))
	if !ok {
		return err
	}
	return errors.New(msg)
}
