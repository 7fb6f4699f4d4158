package mcptool_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/toolfleet/toolfleet/pkg/mcptool"
)

func TestParseManifest(t *testing.T) {
	getenv := func(k string) string {
		return map[string]string{"PATH": "/usr/bin:/bin", "TOKEN": "tok-123456", "KEY": "key-abcdef"}[k]
	}
	cfgs, err := mcptool.ParseManifest([]byte(`{"tools": [], "mcp_servers": [
		{"name": "fs", "command": ["sh", "-c", "x"], "env": {"A": "1"}, "env_from": {"API_KEY": "KEY"},
		 "timeout": "5s", "tools": {"read": {"idempotent": true, "timeout": "1s"}}, "allow": ["read"]},
		{"name": "web", "prefix": "", "url": "https://mcp.example.com/mcp", "headers_from_env": {"Authorization": "TOKEN"}}
	]}`), "", getenv)
	if err != nil {
		t.Fatal(err)
	}
	fs, web := cfgs[0], cfgs[1]
	if fs.Path == "" || strings.Join(fs.Env, " ") != "A=1 API_KEY=key-abcdef PATH=/usr/bin:/bin" || fs.Timeout.String() != "5s" {
		t.Errorf("fs: %+v", fs)
	}
	if o := fs.Tools["read"]; o.Idempotent == nil || !*o.Idempotent || o.Timeout.String() != "1s" {
		t.Errorf("fs tool override: %+v", o)
	}
	if web.Prefix == nil || *web.Prefix != "" || web.Headers["Authorization"] != "tok-123456" {
		t.Errorf("web: %+v", web)
	}
}

func TestParseManifestErrors(t *testing.T) {
	getenv := func(string) string { return "" }
	for _, tc := range []struct{ manifest, want string }{
		{`{"mcp_servers": [{"command": ["sh"]}]}`, `field "name"`},
		{`{"mcp_servers": [{"name": "x"}]}`, `"command" (stdio) and "url"`},
		{`{"mcp_servers": [{"name": "x", "command": ["sh"], "url": "http://h/"}]}`, `not both`},
		{`{"mcp_servers": [{"name": "x", "command": ["no-such-program-here"]}]}`, `field "command[0]"`},
		{`{"mcp_servers": [{"name": "x", "url": "ftp://h/"}]}`, `http or https`},
		{`{"mcp_servers": [{"name": "x", "url": "http://h/", "headers_from_env": {"Authorization": "NOPE"}}]}`, `NOPE is not set`},
		{`{"mcp_servers": [{"name": "x", "command": ["sh"], "env_from": {"K": "NOPE"}}]}`, `NOPE is not set`},
		{`{"mcp_servers": [{"name": "x", "command": ["sh"], "timeout": "soon"}]}`, `field "timeout"`},
		{`{"mcp_servers": [{"name": "x", "command": ["sh"], "prefix": "a.b"}]}`, `field "prefix"`},
		{`{"mcp_servers": [{"name": "x", "command": ["sh"], "colour": "red"}]}`, `field "colour": unknown field`},
		{`{"mcp_servers": [{"name": "x", "command": ["sh"]}, {"name": "x", "command": ["sh"]}]}`, `mcp_servers[1]): field "name": duplicate`},
		{`{"mcp_servers": 7}`, `not valid JSON`},
	} {
		_, err := mcptool.ParseManifest([]byte(tc.manifest), "", getenv)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one saying %q", tc.manifest, err, tc.want)
		}
		var ce *mcptool.ConfigError
		if err != nil && !errors.As(err, &ce) && !strings.Contains(err.Error(), "not valid JSON") {
			t.Errorf("%s: %T is not a *ConfigError", tc.manifest, err)
		}
	}
}

func FuzzParseManifest(f *testing.F) {
	f.Add([]byte(`{"mcp_servers": [{"name": "fs", "command": ["sh"], "env": {"A": "1"}, "tools": {"t": {"timeout": "1s"}}}]}`))
	f.Add([]byte(`{"mcp_servers": [{"name": "w", "url": "http://h/mcp", "headers_from_env": {"X-Key": "K"}}]}`))
	f.Add([]byte(`{"mcp_servers": [{}]}`))
	getenv := func(k string) string { return "v-" + k }
	f.Fuzz(func(t *testing.T, data []byte) {
		cfgs, err := mcptool.ParseManifest(data, "", getenv)
		if err != nil {
			return
		}
		for _, c := range cfgs {
			if err := c.Validate(); err != nil {
				t.Fatalf("parsed a config that does not validate: %v", err)
			}
		}
	})
}
