package mcptool

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"
)

// maxManifestSize bounds a manifest, as the harness does.
const maxManifestSize = 1 << 20

var (
	envNameRE    = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)
	headerNameRE = regexp.MustCompile(`^[A-Za-z0-9-]{1,64}$`)
)

// manifestServer is one entry of a manifest's "mcp_servers".
type manifestServer struct {
	Name             string                  `json:"name"`
	Prefix           *string                 `json:"prefix"`
	Command          []string                `json:"command"`
	Env              map[string]string       `json:"env"`
	EnvFrom          map[string]string       `json:"env_from"`
	Dir              string                  `json:"dir"`
	URL              string                  `json:"url"`
	HeadersFromEnv   map[string]string       `json:"headers_from_env"`
	Timeout          string                  `json:"timeout"`
	Idempotent       *bool                   `json:"idempotent"`
	RequiresApproval *bool                   `json:"requires_approval"`
	Tools            map[string]manifestTool `json:"tools"`
	Allow            []string                `json:"allow"`
	MaxMessageBytes  int                     `json:"max_message_bytes"`
	CancelGrace      string                  `json:"cancel_grace"`
	TrustCancel      bool                    `json:"trust_cancel"`
	StartTimeout     string                  `json:"start_timeout"`
}

type manifestTool struct {
	Idempotent       *bool  `json:"idempotent"`
	RequiresApproval *bool  `json:"requires_approval"`
	Timeout          string `json:"timeout"`
}

// LoadManifest reads the "mcp_servers" of the tool manifest at path (its
// "tools" are the harness's: see harness.LoadManifest). getenv resolves
// "env_from" and "headers_from_env" (nil: os.Getenv); a variable that is
// unset or empty is an error. Relative commands and dirs are relative to
// the manifest's directory.
func LoadManifest(path string, getenv func(string) string) ([]ServerConfig, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("manifest %s: %w", path, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxManifestSize+1))
	if err != nil {
		return nil, fmt.Errorf("manifest %s: %w", path, err)
	}
	dir, err := filepath.Abs(filepath.Dir(path))
	if err != nil {
		return nil, err
	}
	cfgs, err := ParseManifest(data, dir, getenv)
	if err != nil {
		return nil, fmt.Errorf("manifest %s: %w", path, err)
	}
	return cfgs, nil
}

// ParseManifest is [LoadManifest] for a manifest in memory; dir is where
// relative paths start ("": the current directory).
func ParseManifest(data []byte, dir string, getenv func(string) string) ([]ServerConfig, error) {
	if len(data) > maxManifestSize {
		return nil, fmt.Errorf("larger than %d bytes", maxManifestSize)
	}
	if getenv == nil {
		getenv = os.Getenv
	}
	var file struct {
		Servers []json.RawMessage `json:"mcp_servers"`
	}
	if err := json.Unmarshal(data, &file); err != nil {
		return nil, errors.New("not valid JSON")
	}
	if len(file.Servers) > MaxServers {
		return nil, fmt.Errorf(`field "mcp_servers": more than %d servers`, MaxServers)
	}
	var out []ServerConfig
	seen := map[string]bool{}
	for i, raw := range file.Servers {
		c, err := parseServer(raw, dir, getenv)
		if err != nil {
			var ce *ConfigError
			if errors.As(err, &ce) {
				ce.Index = i
				return nil, ce
			}
			return nil, &ConfigError{Index: i, Err: err}
		}
		if seen[c.Name] {
			return nil, &ConfigError{Index: i, Server: c.Name, Field: "name", Err: errors.New("duplicate name")}
		}
		seen[c.Name] = true
		out = append(out, c)
	}
	return out, nil
}

func parseServer(raw json.RawMessage, dir string, getenv func(string) string) (ServerConfig, error) {
	var m manifestServer
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		msg := err.Error()
		if f, ok := strings.CutPrefix(msg, "json: unknown field "); ok {
			return ServerConfig{}, &ConfigError{Field: clip(strings.Trim(f, `"`)), Err: errors.New("unknown field")}
		}
		return ServerConfig{}, errors.New("not a valid server entry (an object with the documented fields)")
	}
	c := ServerConfig{
		Name: m.Name, Prefix: m.Prefix, Dir: m.Dir, URL: m.URL,
		Idempotent: m.Idempotent, RequiresApproval: m.RequiresApproval,
		Allow: m.Allow, MaxMessageBytes: m.MaxMessageBytes, TrustCancel: m.TrustCancel,
	}
	fail := func(field string, err error) (ServerConfig, error) {
		return ServerConfig{}, &ConfigError{Server: c.Name, Field: field, Err: err}
	}
	if err := c.Validate(); err != nil && len(m.Command) == 0 && m.URL == "" {
		return ServerConfig{}, err
	}
	var err error
	if c.Timeout, err = parseDuration(m.Timeout); err != nil {
		return fail("timeout", err)
	}
	if c.CancelGrace, err = parseDuration(m.CancelGrace); err != nil {
		return fail("cancel_grace", err)
	}
	if c.StartTimeout, err = parseDuration(m.StartTimeout); err != nil {
		return fail("start_timeout", err)
	}
	if len(m.Tools) > 0 {
		c.Tools = make(map[string]ToolOverride, len(m.Tools))
		for name, t := range m.Tools {
			d, err := parseDuration(t.Timeout)
			if err != nil {
				return fail("tools."+clip(name)+".timeout", err)
			}
			c.Tools[name] = ToolOverride{Idempotent: t.Idempotent, RequiresApproval: t.RequiresApproval, Timeout: d}
		}
	}
	if m.URL != "" {
		u, err := url.Parse(m.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fail("url", errors.New("must be an http or https URL"))
		}
		if len(m.Env) > 0 || len(m.EnvFrom) > 0 || m.Dir != "" {
			return fail("env", errors.New(`"env", "env_from" and "dir" are for stdio servers ("command")`))
		}
		for h, v := range m.HeadersFromEnv {
			if !headerNameRE.MatchString(h) || !envNameRE.MatchString(v) {
				return fail("headers_from_env", errors.New("maps header names to environment variable names"))
			}
			val := getenv(v)
			if val == "" {
				return fail("headers_from_env."+h, fmt.Errorf("environment variable %s is not set", v))
			}
			if c.Headers == nil {
				c.Headers = map[string]string{}
			}
			c.Headers[h] = val
		}
	}
	if len(m.Command) > 0 {
		if len(m.HeadersFromEnv) > 0 {
			return fail("headers_from_env", errors.New(`is for HTTP servers ("url")`))
		}
		c.Command = m.Command
		if c.Path, err = resolveProgram(m.Command[0], dir); err != nil {
			return fail("command[0]", err)
		}
		if c.Dir != "" && !filepath.IsAbs(c.Dir) && dir != "" {
			c.Dir = filepath.Join(dir, c.Dir)
		}
		env := map[string]string{}
		for k, v := range m.Env {
			if !envNameRE.MatchString(k) || strings.IndexByte(v, 0) >= 0 {
				return fail("env", errors.New("variable names must match "+envNameRE.String()+" and values hold no NUL"))
			}
			env[k] = v
		}
		for k, from := range m.EnvFrom {
			if !envNameRE.MatchString(k) || !envNameRE.MatchString(from) {
				return fail("env_from", errors.New("maps variable names to worker environment variable names"))
			}
			val := getenv(from)
			if val == "" {
				return fail("env_from."+k, fmt.Errorf("environment variable %s is not set", from))
			}
			env[k] = val
		}
		if _, ok := env["PATH"]; !ok {
			env["PATH"] = getenv("PATH")
		}
		keys := make([]string, 0, len(env))
		for k := range env {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			c.Env = append(c.Env, k+"="+env[k])
		}
	}
	if err := c.Validate(); err != nil {
		return ServerConfig{}, err
	}
	return c, nil
}

func parseDuration(s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	switch {
	case err != nil:
		return 0, errors.New(`not a duration such as "30s"`)
	case d <= 0:
		return 0, errors.New("must be > 0")
	case d > 24*time.Hour:
		return 0, errors.New("must be <= 24h")
	}
	return d, nil
}

// resolveProgram finds the server's program: in PATH without a slash, else
// relative to dir.
func resolveProgram(name, dir string) (string, error) {
	if name == "" {
		return "", errors.New("must not be empty")
	}
	if !strings.Contains(name, "/") {
		p, err := exec.LookPath(name)
		if err != nil {
			return "", fmt.Errorf("%q not found in PATH", clip(name))
		}
		return filepath.Abs(p)
	}
	p := name
	if !filepath.IsAbs(p) && dir != "" {
		p = filepath.Join(dir, p)
	}
	fi, err := os.Stat(p)
	switch {
	case err != nil:
		return "", fmt.Errorf("%q: no such file", clip(p))
	case fi.IsDir() || fi.Mode().Perm()&0o111 == 0:
		return "", fmt.Errorf("%q is not an executable file", clip(p))
	}
	return filepath.Abs(p)
}

func clip(s string) string {
	if len(s) > 64 {
		return s[:64]
	}
	return s
}
