package harness

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/toolfleet/toolfleet/pkg/protocol"
	"github.com/toolfleet/toolfleet/pkg/schema"
)

// Bounds on a manifest.
const (
	// MaxManifestSize bounds a manifest, in bytes.
	MaxManifestSize = 1 << 20
	// MaxManifestTools bounds the tools of one manifest.
	MaxManifestTools = 1000
	// MaxToolTimeout bounds a tool's timeout.
	MaxToolTimeout = 24 * time.Hour

	maxDescriptionLen = 8 << 10
	maxCommandArgs    = 256
	maxArgLen         = 4 << 10
	maxEnvVars        = 64
	maxEnvValueLen    = 4 << 10
)

var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)

// manifestFile is the JSON manifest of docs/design.md §6.
type manifestFile struct {
	Tools []json.RawMessage `json:"tools"`
	// MCPServers is read by package mcptool; "tools" may then be absent.
	MCPServers json.RawMessage `json:"mcp_servers"`
}

// manifestTool is one entry of a manifest.
type manifestTool struct {
	Name             string            `json:"name"`
	Description      string            `json:"description"`
	Parameters       json.RawMessage   `json:"parameters"`
	Timeout          string            `json:"timeout"`
	Command          []string          `json:"command"`
	Idempotent       bool              `json:"idempotent"`
	RequiresApproval bool              `json:"requires_approval"`
	ReadOnly         bool              `json:"read_only"`
	Env              map[string]string `json:"env"`
	// User and Group (names or numeric ids) run the tool as another user;
	// the worker must run as root.
	User   string `json:"user"`
	Group  string `json:"group"`
	Limits Limits `json:"limits"`
	// RateLimit is the tool's fleet-wide rate limit: {"rate": calls per
	// second, "burst": calls at once}.
	RateLimit *protocol.RateLimit `json:"rate_limit"`
}

// ParseManifest parses a JSON tool manifest:
//
//	{"tools": [{"name": "wc", "description": "...", "parameters": {...},
//	  "timeout": "30s", "command": ["wc", "-c"], "idempotent": true,
//	  "requires_approval": false, "env": {"LANG": "C"},
//	  "user": "nobody", "limits": {"memory_bytes": 268435456, "cpu_seconds": 10,
//	  "processes": 64, "open_files": 256}, "rate_limit": {"rate": 20, "burst": 5}}]}
//
// "rate_limit" is the tool's fleet-wide limit: at most "rate" calls start
// per second across every worker serving it, "burst" at once (default 1);
// an operator's limit ("coordinator tools limit") replaces it.
//
// "user" (and "group"), names or numeric ids, run the tool as that user:
// the worker must be root, or the manifest is refused. "limits" are the
// tool's rlimits ([Limits]). Both need Linux.
//
// Every tool is an exec tool: "command" is required. A manifest may also
// list "mcp_servers" (read by package mcptool), and "tools" is then optional. Decoding is strict
// (unknown fields, trailing data and more than [MaxManifestSize] bytes are
// refused) and errors name the tool and the field. A command without a slash
// is looked up in PATH now; one with a slash is taken relative to the current
// directory ([LoadManifest]: the manifest's directory). Missing "parameters"
// means {"type":"object"}; missing "timeout" means [DefaultTimeout].
func ParseManifest(data []byte) ([]Tool, error) {
	tools, err := parseManifest(data, "")
	if err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	return tools, nil
}

// LoadManifest reads and parses the manifest at path (see [ParseManifest]).
// Commands with a slash are relative to the manifest's directory.
func LoadManifest(path string) ([]Tool, error) {
	tools, err := loadManifest(path)
	if err != nil {
		return nil, fmt.Errorf("manifest %s: %w", path, err)
	}
	return tools, nil
}

func loadManifest(path string) ([]Tool, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil {
		return nil, err
	} else if !fi.Mode().IsRegular() {
		return nil, errors.New("not a regular file")
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxManifestSize+1))
	if err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(filepath.Dir(path))
	if err != nil {
		return nil, err
	}
	return parseManifest(data, dir)
}

func parseManifest(data []byte, dir string) ([]Tool, error) {
	if len(data) > MaxManifestSize {
		return nil, fmt.Errorf("larger than %d bytes", MaxManifestSize)
	}
	var file manifestFile
	if err := decodeStrict(data, &file); err != nil {
		return nil, err
	}
	switch {
	case file.Tools == nil && file.MCPServers == nil:
		return nil, errors.New(`field "tools": required`)
	case len(file.Tools) > MaxManifestTools:
		return nil, fmt.Errorf(`field "tools": more than %d tools`, MaxManifestTools)
	}
	pathEnv := os.Getenv("PATH")
	seen := make(map[string]bool, len(file.Tools))
	tools := make([]Tool, 0, len(file.Tools))
	for i, raw := range file.Tools {
		t, err := parseTool(i, raw, dir, pathEnv)
		if err != nil {
			return nil, err
		}
		if seen[t.Name] {
			return nil, &ToolError{Index: i, Tool: t.Name, Field: "name", Err: errors.New("duplicate name")}
		}
		seen[t.Name] = true
		tools = append(tools, t)
	}
	return tools, nil
}

// parseTool decodes and checks one manifest entry.
func parseTool(i int, raw json.RawMessage, dir, pathEnv string) (Tool, error) {
	name := peekName(raw)
	fail := func(field string, err error) (Tool, error) {
		return Tool{}, &ToolError{Index: i, Tool: name, Field: field, Err: err}
	}
	var m manifestTool
	if err := decodeStrict(raw, &m); err != nil {
		var fe *fieldError
		if errors.As(err, &fe) {
			return fail(fe.field, fe.err)
		}
		return fail("", err)
	}
	switch {
	case m.Name == "":
		return fail("name", errors.New("required"))
	case !protocol.ValidToken(m.Name):
		return fail("name", errors.New("must match "+protocol.TokenPattern))
	case len(m.Description) > maxDescriptionLen:
		return fail("description", fmt.Errorf("longer than %d bytes", maxDescriptionLen))
	}

	params := json.RawMessage(defaultParameters)
	if len(m.Parameters) > 0 && !bytes.Equal(bytes.TrimSpace(m.Parameters), []byte("null")) {
		params = slices.Clone(m.Parameters)
	}
	if _, err := schema.Compile(m.Name, params); err != nil {
		return fail("parameters", schemaError(m.Name, err))
	}

	var timeout time.Duration
	if m.Timeout != "" {
		d, err := time.ParseDuration(m.Timeout)
		switch {
		case err != nil:
			return fail("timeout", errors.New(`not a duration such as "30s" or "1m30s"`))
		case d <= 0:
			return fail("timeout", errors.New("must be > 0"))
		case d > MaxToolTimeout:
			return fail("timeout", fmt.Errorf("must be <= %s", MaxToolTimeout))
		}
		timeout = d
	}

	cmd, field, err := buildCommand(m.Command, m.Env, dir, pathEnv)
	if err != nil {
		return fail(field, err)
	}
	if (m.User != "" || m.Group != "" || !m.Limits.zero()) && runtime.GOOS != "linux" {
		return fail("limits", errors.New("user, group and limits need Linux"))
	}
	if cmd.user, field, err = resolveUser(m.User, m.Group); err != nil {
		return fail(field, err)
	}
	cmd.limits = m.Limits
	var rate protocol.RateLimit
	if m.RateLimit != nil {
		if err := m.RateLimit.Validate(); err != nil {
			return fail("rate_limit", err)
		}
		rate = *m.RateLimit
	}
	return Tool{
		Name:             m.Name,
		Description:      m.Description,
		Parameters:       params,
		Timeout:          timeout,
		Idempotent:       m.Idempotent,
		RequiresApproval: m.RequiresApproval,
		ReadOnly:         m.ReadOnly,
		RateLimit:        rate,
		Run:              cmd.run,
		cmd:              cmd,
	}, nil
}

// buildCommand checks argv and env, resolves the program and builds the
// environment. On error it returns the field at fault.
func buildCommand(argv []string, env map[string]string, dir, pathEnv string) (*command, string, error) {
	switch {
	case len(argv) == 0:
		return nil, "command", errors.New("required: the program and its arguments, e.g. [\"wc\", \"-c\"]")
	case len(argv) > maxCommandArgs:
		return nil, "command", fmt.Errorf("more than %d arguments", maxCommandArgs)
	}
	for j, a := range argv {
		field := fmt.Sprintf("command[%d]", j)
		switch {
		case strings.IndexByte(a, 0) >= 0:
			return nil, field, errors.New("contains a NUL byte")
		case len(a) > maxArgLen:
			return nil, field, fmt.Errorf("longer than %d bytes", maxArgLen)
		}
	}
	path, err := resolveProgram(argv[0], dir)
	if err != nil {
		return nil, "command[0]", err
	}

	if len(env) > maxEnvVars {
		return nil, "env", fmt.Errorf("more than %d variables", maxEnvVars)
	}
	keys := make([]string, 0, len(env))
	for k, v := range env {
		switch {
		case !envNameRE.MatchString(k):
			return nil, "env", errors.New("variable names must match " + envNameRE.String())
		case strings.IndexByte(v, 0) >= 0:
			return nil, "env." + k, errors.New("contains a NUL byte")
		case len(v) > maxEnvValueLen:
			return nil, "env." + k, fmt.Errorf("longer than %d bytes", maxEnvValueLen)
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	vars := make([]string, 0, len(keys)+1)
	if _, ok := env["PATH"]; !ok {
		vars = append(vars, "PATH="+pathEnv)
	}
	for _, k := range keys {
		vars = append(vars, k+"="+env[k])
	}
	return &command{path: path, argv: slices.Clone(argv), env: vars}, "", nil
}

// resolveProgram returns the absolute path of an executable: name is looked
// up in PATH if it has no slash, else taken relative to dir (or the current
// directory when dir is empty).
func resolveProgram(name, dir string) (string, error) {
	if name == "" {
		return "", errors.New("must not be empty")
	}
	if !strings.Contains(name, "/") {
		p, err := exec.LookPath(name)
		if errors.Is(err, exec.ErrDot) {
			return "", errors.New("found only through a relative PATH entry; give a path")
		}
		if err != nil {
			return "", fmt.Errorf("%q not found in PATH", name)
		}
		return filepath.Abs(p)
	}
	p := name
	if !filepath.IsAbs(p) {
		if dir == "" {
			wd, err := os.Getwd()
			if err != nil {
				return "", err
			}
			dir = wd
		}
		p = filepath.Join(dir, p)
	}
	fi, err := os.Stat(p)
	switch {
	case err != nil:
		return "", fmt.Errorf("%q: no such file", p)
	case fi.IsDir():
		return "", fmt.Errorf("%q is a directory", p)
	case fi.Mode().Perm()&0o111 == 0:
		return "", fmt.Errorf("%q is not executable", p)
	}
	return p, nil
}

// peekName returns the entry's name if it has a valid one, for error
// messages; "" otherwise.
func peekName(raw json.RawMessage) string {
	var v struct {
		Name string `json:"name"`
	}
	if json.Unmarshal(raw, &v) != nil || !protocol.ValidToken(v.Name) {
		return ""
	}
	return v.Name
}

// fieldError is a decoding error that belongs to one field.
type fieldError struct {
	field string
	err   error
}

func (e *fieldError) Error() string { return fmt.Sprintf("field %q: %v", e.field, e.err) }

// decodeStrict decodes exactly one JSON value into v, refusing unknown fields
// and trailing data, with errors that name the field.
func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return describeDecodeError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("trailing data after the JSON document")
	}
	return nil
}

func describeDecodeError(err error) error {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Errorf("not valid JSON (at byte %d)", se.Offset)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return errors.New("not valid JSON (unexpected end)")
	case errors.As(err, &te):
		if te.Field == "" {
			return fmt.Errorf("must be a JSON object, not %s", te.Value)
		}
		return &fieldError{field: te.Field, err: fmt.Errorf("must be %s, not %s", jsonKind(te.Type.Kind().String()), te.Value)}
	}
	msg := err.Error()
	if f, ok := strings.CutPrefix(msg, "json: unknown field "); ok {
		name, _ := protocol.Truncate(strings.Trim(f, `"`), 64)
		return &fieldError{field: name, err: errors.New("unknown field")}
	}
	return errors.New("not valid JSON")
}

// jsonKind names a Go kind as a JSON type.
func jsonKind(k string) string {
	switch k {
	case "string":
		return "a string"
	case "bool":
		return "true or false"
	case "slice":
		return "an array"
	case "map", "struct":
		return "an object"
	}
	return "a " + k
}
