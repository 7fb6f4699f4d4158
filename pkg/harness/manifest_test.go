package harness_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

func TestParseManifest(t *testing.T) {
	tools, err := harness.ParseManifest([]byte(`{"tools":[
		{"name":"count","description":"Count bytes.","command":["wc","-c"],"timeout":"1m30s",
		 "parameters":{"type":"object","properties":{"text":{"type":"string"}}},
		 "idempotent":true,"requires_approval":true,"env":{"LANG":"C"}},
		{"name":"plain","command":["cat"]}
	]}`))
	if err != nil {
		t.Fatalf("ParseManifest: %v", err)
	}
	if len(tools) != 2 {
		t.Fatalf("got %d tools, want 2", len(tools))
	}
	c := tools[0]
	if c.Name != "count" || c.Description != "Count bytes." || c.Timeout != 90*time.Second || !c.Idempotent || !c.RequiresApproval || c.Run == nil {
		t.Errorf("count = %+v", c)
	}
	p := tools[1]
	if string(p.Parameters) != `{"type":"object"}` || p.Timeout != 0 || p.Idempotent || p.RequiresApproval {
		t.Errorf("plain: Parameters=%s Timeout=%v, want the defaults", p.Parameters, p.Timeout)
	}
	h, _ := newHarness(t, harness.Config{}, tools...)
	r := h.Execute(t.Context(), harness.Call{Tool: "count", Arguments: json.RawMessage(`{"text":"abc"}`)})
	if r.Outcome != protocol.OutcomeOK || strings.TrimSpace(r.Output) != "14" {
		t.Fatalf("count result = %+v, want ok 14 (wc -c of the arguments)", r)
	}
	if h.Specs()[0].TimeoutMS != 90_000 {
		t.Errorf("TimeoutMS = %d, want 90000", h.Specs()[0].TimeoutMS)
	}
}

func TestParseManifestErrors(t *testing.T) {
	tests := []struct{ name, manifest, want string }{
		{"not JSON", `{"tools":[`, "not valid JSON"},
		{"not an object", `[1]`, "must be a JSON object"},
		{"trailing data", `{"tools":[]} {}`, "trailing data"},
		{"no tools", `{}`, `field "tools": required`},
		{"unknown top field", `{"tools":[],"extra":1}`, `field "extra": unknown field`},
		{"tools not array", `{"tools":{}}`, `field "tools": must be an array`},
		{"unknown tool field", `{"tools":[{"name":"a","command":["cat"],"comand":["x"]}]}`, `tool "a" (tools[0]): field "comand": unknown field`},
		{"missing name", `{"tools":[{"command":["cat"]}]}`, `tools[0]: field "name": required`},
		{"bad name", `{"tools":[{"name":"a.b","command":["cat"]}]}`, `tools[0]: field "name": must match`},
		{"name not string", `{"tools":[{"name":5,"command":["cat"]}]}`, `tools[0]: field "name": must be a string, not number`},
		{"duplicate", `{"tools":[{"name":"a","command":["cat"]},{"name":"a","command":["cat"]}]}`, `tool "a" (tools[1]): field "name": duplicate name`},
		{"missing command", `{"tools":[{"name":"a"}]}`, `tool "a" (tools[0]): field "command": required`},
		{"command not array", `{"tools":[{"name":"a","command":"cat"}]}`, `field "command": must be an array, not string`},
		{"empty program", `{"tools":[{"name":"a","command":[""]}]}`, `field "command[0]": must not be empty`},
		{"program not in PATH", `{"tools":[{"name":"a","command":["no-such-program-4f1e"]}]}`, `field "command[0]": "no-such-program-4f1e" not found in PATH`},
		{"program path missing", `{"tools":[{"name":"a","command":["/no/such/program"]}]}`, `field "command[0]": "/no/such/program": no such file`},
		{"program is a directory", `{"tools":[{"name":"a","command":["/"]}]}`, "is a directory"},
		{"NUL in argument", `{"tools":[{"name":"a","command":["cat","a\u0000b"]}]}`, `field "command[1]": contains a NUL byte`},
		{"bad timeout", `{"tools":[{"name":"a","command":["cat"],"timeout":"soon"}]}`, `tool "a" (tools[0]): field "timeout": not a duration`},
		{"timeout as number", `{"tools":[{"name":"a","command":["cat"],"timeout":30}]}`, `field "timeout": must be a string, not number`},
		{"negative timeout", `{"tools":[{"name":"a","command":["cat"],"timeout":"-1s"}]}`, `field "timeout": must be > 0`},
		{"huge timeout", `{"tools":[{"name":"a","command":["cat"],"timeout":"1000h"}]}`, `field "timeout": must be <=`},
		{"bad env name", `{"tools":[{"name":"a","command":["cat"],"env":{"A=B":"x"}}]}`, `field "env": variable names must match`},
		{"env value not string", `{"tools":[{"name":"a","command":["cat"],"env":{"A":1}}]}`, `tool "a" (tools[0]): field "env": must be a string, not number`},
		{"schema not object type", `{"tools":[{"name":"a","command":["cat"],"parameters":{"type":"array"}}]}`, `tool "a" (tools[0]): field "parameters"`},
		{"schema invalid", `{"tools":[{"name":"a","command":["cat"],"parameters":{"type":"object","required":"x"}}]}`, `field "parameters"`},
		{"schema external ref", `{"tools":[{"name":"a","command":["cat"],"parameters":{"$ref":"file:///etc/passwd"}}]}`, `field "parameters"`},
		{"too large", `{"tools":[]}` + strings.Repeat(" ", harness.MaxManifestSize), "larger than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tools, err := harness.ParseManifest([]byte(tt.manifest))
			if err == nil {
				t.Fatalf("ParseManifest succeeded with %d tools, want error containing %q", len(tools), tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error = %q, want it to contain %q", err, tt.want)
			}
			if !strings.HasPrefix(err.Error(), "manifest: ") {
				t.Errorf("error = %q, want the prefix \"manifest: \"", err)
			}
		})
	}
}

func TestLoadManifestResolvesCommands(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bin", "hello"), []byte("#!/bin/sh\necho hello\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bin", "noexec"), []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}

	// Relative to the manifest's directory, not the current one.
	tools, err := harness.LoadManifest(write("ok.json", `{"tools":[{"name":"hello","command":["bin/hello"]}]}`))
	if err != nil {
		t.Fatalf("LoadManifest: %v", err)
	}
	h, _ := newHarness(t, harness.Config{}, tools...)
	if r := h.Execute(t.Context(), harness.Call{Tool: "hello", Arguments: json.RawMessage(`{}`)}); r.Outcome != protocol.OutcomeOK || r.Output != "hello\n" {
		t.Fatalf("result = %+v", r)
	}

	_, err = harness.LoadManifest(write("noexec.json", `{"tools":[{"name":"x","command":["./bin/noexec"]}]}`))
	if err == nil || !strings.Contains(err.Error(), "not executable") {
		t.Fatalf("non-executable program: err = %v", err)
	}
	_, err = harness.LoadManifest(filepath.Join(dir, "missing.json"))
	if err == nil || !strings.Contains(err.Error(), "missing.json") {
		t.Fatalf("missing manifest: err = %v", err)
	}
	big := write("big.json", `{"tools":[]}`+strings.Repeat(" ", harness.MaxManifestSize))
	if _, err = harness.LoadManifest(big); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("oversized manifest: err = %v", err)
	}
	if _, err = harness.LoadManifest(dir); err == nil {
		t.Fatal("loading a directory succeeded")
	}
}

func FuzzParseManifest(f *testing.F) {
	for _, seed := range []string{
		`{"tools":[]}`,
		`{"tools":[{"name":"a","command":["cat"]}]}`,
		`{"tools":[{"name":"a","description":"d","parameters":{"type":"object","properties":{"x":{"type":"integer"}}},"timeout":"5s","command":["cat","-"],"idempotent":true,"requires_approval":true,"env":{"A":"b"}}]}`,
		`{"tools":[{"name":"a","command":["cat"]},{"name":"a","command":["cat"]}]}`,
		`{"tools":[{"name":"a","command":["/bin/sh"],"timeout":"-5s"}]}`,
		`{"tools":[{"name":"a","command":["cat"],"parameters":null}]}`,
		`{"tools":[{"name":"a","command":["cat"],"parameters":{"$ref":"#/$defs/x","$defs":{"x":{"type":"object"}}}}]}`,
		`[`, `null`, `{"tools":null}`, "",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		tools, err := harness.ParseManifest(data)
		if err != nil {
			if tools != nil {
				t.Fatal("tools returned with an error")
			}
			if !strings.HasPrefix(err.Error(), "manifest: ") {
				t.Fatalf("error without prefix: %v", err)
			}
			return
		}
		// Whatever parses must be servable.
		h, err := harness.New(harness.Config{}, tools...)
		if err != nil {
			t.Fatalf("New refused a parsed manifest: %v", err)
		}
		specs := h.Specs()
		if len(specs) != len(tools) {
			t.Fatalf("%d specs for %d tools", len(specs), len(tools))
		}
		for _, s := range specs {
			if err := s.Validate(); err != nil {
				t.Fatalf("spec %s invalid: %v", s.Name, err)
			}
		}
	})
}

func TestManifestWithMCPServersOnly(t *testing.T) {
	tools, err := harness.ParseManifest([]byte(`{"mcp_servers": [{"name": "fs", "command": ["x"]}]}`))
	if err != nil || len(tools) != 0 {
		t.Fatalf("a manifest of MCP servers only: %v, %d tools", err, len(tools))
	}
	if _, err := harness.ParseManifest([]byte(`{}`)); err == nil || !strings.Contains(err.Error(), `field "tools": required`) {
		t.Errorf("an empty manifest: %v", err)
	}
}
