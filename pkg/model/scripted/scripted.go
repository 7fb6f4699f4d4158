package scripted

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/template"

	"github.com/toolfleet/toolfleet/pkg/loop"
)

// Limits on a script.
const (
	// MaxScriptBytes bounds a script file.
	MaxScriptBytes = 4 << 20
	// MaxTurns bounds the turns of a script.
	MaxTurns = 1000
	// MaxCallsPerTurn bounds the tool calls of one turn, generated or not.
	MaxCallsPerTurn = 10000
	// MaxContentBytes bounds one turn's rendered content.
	MaxContentBytes = 1 << 20
	// MaxVariants bounds the variants of a script.
	MaxVariants = 16
)

// EndedContent is the answer once a script has no more turns.
const EndedContent = "(script ended)"

// NoResult replaces {{result "id"}} when the transcript has no answer for id.
const NoResult = "(no result)"

// ErrInvalidScript is any script that fails to parse; the *ScriptError
// wrapping it names the field.
var ErrInvalidScript = errors.New("invalid script")

// ScriptError is a script that fails to parse.
type ScriptError struct {
	// Field is the JSON path of the offending field, e.g.
	// "turns[2].tool_calls[0].name", or "" for the document as a whole.
	Field string
	Err   error
}

func (e *ScriptError) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("scripted: invalid script: %v", e.Err)
	}
	return fmt.Sprintf("scripted: invalid script: %s: %v", e.Field, e.Err)
}

func (e *ScriptError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrInvalidScript) true for every ScriptError.
func (e *ScriptError) Is(target error) bool { return target == ErrInvalidScript }

// Model replays a script. It is immutable once parsed and safe for
// concurrent runs.
type Model struct {
	turns    []turn
	variants []variant
}

// variant is turns a run whose instructions hold a text gets instead.
type variant struct {
	contains string
	turns    []turn
}

var _ loop.Model = (*Model)(nil)

type turn struct {
	text  string             // content when it has no actions
	tmpl  *template.Template // content when it has actions
	calls []loop.ToolCall
}

// The file format.
type fileScript struct {
	Turns    *[]fileTurn   `json:"turns"`
	Variants []fileVariant `json:"variants"`
}

type fileVariant struct {
	SystemContains string      `json:"system_contains"`
	Turns          *[]fileTurn `json:"turns"`
}

type fileTurn struct {
	Content   string     `json:"content"`
	ToolCalls []fileCall `json:"tool_calls"`
	Calls     *fileGen   `json:"calls"`
}

type fileCall struct {
	ID        *string         `json:"id"`
	Name      *string         `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
}

type fileGen struct {
	Name      *string         `json:"name"`
	Count     int             `json:"count"`
	Arguments json.RawMessage `json:"arguments"`
	IDPrefix  *string         `json:"id_prefix"`
}

//go:embed demo.json
var demoScript []byte

// Demo returns the bundled demo script: a two-round calculator run.
func Demo() *Model {
	m, err := Parse(demoScript)
	if err != nil {
		panic("scripted: bundled demo.json: " + err.Error()) // caught by the package's tests
	}
	return m
}

// Load reads and parses the script at path.
func Load(path string) (*Model, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("scripted: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxScriptBytes+1))
	if err != nil {
		return nil, fmt.Errorf("scripted: reading %s: %w", path, err)
	}
	m, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return m, nil
}

// Parse parses a script (see the package documentation for the format).
func Parse(data []byte) (*Model, error) {
	if len(data) > MaxScriptBytes {
		return nil, &ScriptError{Err: fmt.Errorf("larger than %d bytes", MaxScriptBytes)}
	}
	var f fileScript
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, decodeError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, &ScriptError{Err: errors.New("trailing data after the script object")}
	}
	if f.Turns == nil {
		return nil, &ScriptError{Field: "turns", Err: errors.New("required")}
	}
	if len(*f.Turns) > MaxTurns {
		return nil, &ScriptError{Field: "turns", Err: fmt.Errorf("more than %d turns", MaxTurns)}
	}
	turns, err := parseTurns("", *f.Turns)
	if err != nil {
		return nil, err
	}
	m := &Model{turns: turns}
	if len(f.Variants) > MaxVariants {
		return nil, &ScriptError{Field: "variants", Err: fmt.Errorf("more than %d variants", MaxVariants)}
	}
	for i, fv := range f.Variants {
		field := fmt.Sprintf("variants[%d]", i)
		switch {
		case fv.SystemContains == "":
			return nil, &ScriptError{Field: field + ".system_contains", Err: errors.New("required")}
		case fv.Turns == nil:
			return nil, &ScriptError{Field: field + ".turns", Err: errors.New("required")}
		case len(*fv.Turns) > MaxTurns:
			return nil, &ScriptError{Field: field + ".turns", Err: fmt.Errorf("more than %d turns", MaxTurns)}
		}
		vt, err := parseTurns(field+".", *fv.Turns)
		if err != nil {
			return nil, err
		}
		m.variants = append(m.variants, variant{contains: fv.SystemContains, turns: vt})
	}
	return m, nil
}

// parseTurns parses the turns of a script or a variant (prefix names it
// in errors).
func parseTurns(prefix string, fts []fileTurn) ([]turn, error) {
	turns := make([]turn, 0, len(fts))
	for i, ft := range fts {
		t, err := parseTurn(i, ft)
		if err != nil {
			var se *ScriptError
			if prefix != "" && errors.As(err, &se) {
				se.Field = prefix + se.Field
			}
			return nil, err
		}
		turns = append(turns, t)
	}
	return turns, nil
}

func decodeError(err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return &ScriptError{Err: fmt.Errorf("not valid JSON at byte %d: %v", syn.Offset, err)}
	case errors.As(err, &typ):
		return &ScriptError{Field: typ.Field, Err: fmt.Errorf("got a JSON %s, want %s", typ.Value, jsonKind(typ.Type.Kind().String()))}
	case errors.Is(err, io.EOF):
		return &ScriptError{Err: errors.New("empty")}
	case errors.Is(err, io.ErrUnexpectedEOF):
		return &ScriptError{Err: errors.New("not valid JSON: unexpected end")}
	default:
		// Unknown fields: "json: unknown field \"x\"".
		return &ScriptError{Err: err}
	}
}

func jsonKind(goKind string) string {
	switch goKind {
	case "string":
		return "a string"
	case "int", "int64":
		return "an integer"
	case "slice":
		return "an array"
	case "struct", "ptr", "map":
		return "an object"
	default:
		return goKind
	}
}

func parseTurn(i int, ft fileTurn) (turn, error) {
	field := func(f string) string { return fmt.Sprintf("turns[%d]%s", i, f) }
	var t turn
	tmpl, err := parseContent(ft.Content)
	if err != nil {
		return t, &ScriptError{Field: field(".content"), Err: err}
	}
	if tmpl == nil {
		t.text = ft.Content
	}
	t.tmpl = tmpl

	n := len(ft.ToolCalls)
	if ft.Calls != nil {
		if ft.Calls.Count < 1 || ft.Calls.Count > MaxCallsPerTurn {
			return t, &ScriptError{Field: field(".calls.count"), Err: fmt.Errorf("must be between 1 and %d", MaxCallsPerTurn)}
		}
		n += ft.Calls.Count
	}
	if n > MaxCallsPerTurn {
		return t, &ScriptError{Field: field(""), Err: fmt.Errorf("more than %d tool calls", MaxCallsPerTurn)}
	}
	if n > 0 {
		t.calls = make([]loop.ToolCall, 0, n)
	}
	for j, fc := range ft.ToolCalls {
		f := field(fmt.Sprintf(".tool_calls[%d]", j))
		if fc.Name == nil {
			return t, &ScriptError{Field: f + ".name", Err: errors.New("required")}
		}
		args, err := arguments(fc.Arguments)
		if err != nil {
			return t, &ScriptError{Field: f + ".arguments", Err: err}
		}
		id := "call_" + strconv.Itoa(i+1) + "_" + strconv.Itoa(j+1)
		if fc.ID != nil {
			id = *fc.ID
		}
		t.calls = append(t.calls, toolCall(id, *fc.Name, args))
	}
	if g := ft.Calls; g != nil {
		if g.Name == nil {
			return t, &ScriptError{Field: field(".calls.name"), Err: errors.New("required")}
		}
		args, err := arguments(g.Arguments)
		if err != nil {
			return t, &ScriptError{Field: field(".calls.arguments"), Err: err}
		}
		prefix := "gen" + strconv.Itoa(i+1)
		if g.IDPrefix != nil {
			prefix = *g.IDPrefix
		}
		for k := 1; k <= g.Count; k++ {
			t.calls = append(t.calls, toolCall(prefix+"-"+strconv.Itoa(k), *g.Name, args))
		}
	}
	return t, nil
}

func toolCall(id, name, args string) loop.ToolCall {
	return loop.ToolCall{ID: id, Type: "function", Function: loop.FunctionCall{Name: name, Arguments: args}}
}

// arguments turns a script's "arguments" into the text the model sends: a
// JSON string verbatim, any other value compacted, nothing as {}.
func arguments(raw json.RawMessage) (string, error) {
	if len(raw) == 0 {
		return "{}", nil
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", err
		}
		return s, nil
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return "", err
	}
	return buf.String(), nil
}

// Complete answers with the turn at the run's position: the number of
// assistant messages in req.Messages. It fails only when ctx is done or
// rendering the content fails.
func (m *Model) Complete(ctx context.Context, req loop.Request) (*loop.Response, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	pos := 0
	for _, msg := range req.Messages {
		if msg.Role == "assistant" {
			pos++
		}
	}
	turns := m.runTurns(req.Messages)
	if pos >= len(turns) {
		return &loop.Response{
			Message:      loop.Message{Role: "assistant", Content: EndedContent},
			FinishReason: "stop",
		}, nil
	}
	t := turns[pos]
	content := t.text
	if t.tmpl != nil {
		var err error
		content, err = render(t.tmpl, req.Messages)
		if err != nil {
			return nil, fmt.Errorf("scripted: turn %d: content: %w", pos+1, err)
		}
	}
	resp := &loop.Response{
		Message:      loop.Message{Role: "assistant", Content: content},
		FinishReason: "stop",
	}
	if len(t.calls) > 0 {
		resp.Message.ToolCalls = append([]loop.ToolCall(nil), t.calls...)
		resp.FinishReason = "tool_calls"
	}
	return resp, nil
}

// runTurns returns the turns of the first variant whose text one of the
// transcript's system messages holds, else the script's own.
func (m *Model) runTurns(msgs []loop.Message) []turn {
	for _, v := range m.variants {
		for _, msg := range msgs {
			if msg.Role == "system" && strings.Contains(msg.Content, v.contains) {
				return v.turns
			}
		}
	}
	return m.turns
}

// Turns reports how many turns the script has.
func (m *Model) Turns() int { return len(m.turns) }
