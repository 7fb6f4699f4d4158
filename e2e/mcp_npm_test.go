package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The versions of the npm MCP servers the e2e tests run, and of the MCP
// Inspector whose CLI is the third-party client.
const (
	npmMCPVersion    = "2026.8.31"
	inspectorVersion = "2.12.0"
)

var npmMCP struct {
	dir  string // the install prefix, when installed
	skip string // why the tests that need them skip
}

// installNPMServers installs @modelcontextprotocol/server-everything and
// server-filesystem into $(go env GOCACHE)/toolfleet-npm-mcp-<version> the
// first time (TestMain calls it before any test's clock starts). Without
// node and npm, or when the install fails, the tests that need them skip.
func installNPMServers() {
	for _, bin := range []string{"node", "npm"} {
		if _, err := exec.LookPath(bin); err != nil {
			npmMCP.skip = bin + " is not installed: the tests against real npm MCP servers need node and npm (and the npm registry, once)"
			return
		}
	}
	out, err := exec.Command("go", "env", "GOCACHE").Output()
	if err != nil {
		npmMCP.skip = "go env GOCACHE: " + err.Error()
		return
	}
	dir := filepath.Join(strings.TrimSpace(string(out)), "toolfleet-npm-mcp-"+npmMCPVersion)
	installed := true
	for _, p := range []string{npmServerScript(dir, "server-filesystem"), npmServerScript(dir, "server-everything"), inspectorBin(dir)} {
		if _, err := os.Stat(p); err != nil {
			installed = false
		}
	}
	if installed {
		npmMCP.dir = dir
		return
	}
	fmt.Fprintf(os.Stderr, "e2e: installing the npm MCP servers %s into %s (first run only)...\n", npmMCPVersion, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npm", "install", "--prefix", dir, "--no-audit", "--no-fund", "--loglevel", "warn",
		"@modelcontextprotocol/server-everything@"+npmMCPVersion, "@modelcontextprotocol/server-filesystem@"+npmMCPVersion,
		"@modelcontextprotocol/inspector@"+inspectorVersion)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		npmMCP.skip = fmt.Sprintf("npm install of the MCP servers failed (%v): no registry access?", err)
		return
	}
	fmt.Fprintln(os.Stderr, "e2e: npm MCP servers installed")
	npmMCP.dir = dir
}

func inspectorBin(dir string) string {
	return filepath.Join(dir, "node_modules", ".bin", "mcp-inspector")
}

func npmServerScript(dir, pkg string) string {
	return filepath.Join(dir, "node_modules", "@modelcontextprotocol", pkg, "dist", "index.js")
}

// TestMCPRealNPMServers serves the tools of the reference MCP servers from
// npm through the fleet: server-everything's long-running operation (with
// progress), structured content, image and environment tools (with a canary
// in the server's environment) and server-filesystem rooted in a directory.
func TestMCPRealNPMServers(t *testing.T) {
	t.Parallel()
	if npmMCP.skip != "" {
		t.Skip(npmMCP.skip)
	}
	node, _ := exec.LookPath("node")
	f := newFleet(t)
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "hello.txt"), []byte("hello from the root\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	manifest := f.writeJSON("npm-tools.json", map[string]any{"mcp_servers": []any{
		map[string]any{
			"name":     "ev",
			"command":  []string{node, npmServerScript(npmMCP.dir, "server-everything"), "stdio"},
			"env_from": map[string]string{"EV_SECRET": "E2E_EV_SECRET"},
			"allow":    []string{"echo", "get-env", "get-structured-content", "get-tiny-image", "trigger-long-running-operation"},
			// annotations never lower a gate: the operator does, here
			"requires_approval": false,
		},
		map[string]any{
			"name":              "fs",
			"command":           []string{node, npmServerScript(npmMCP.dir, "server-filesystem"), root},
			"allow":             []string{"read_text_file", "list_directory"},
			"requires_approval": false,
		},
	}})
	worker := startProcEnv(t, "toolworker", []string{"E2E_EV_SECRET=" + mcpCanary}, bins.toolworker,
		"--nats-url", f.url(), "--tools", manifest, "--name", "npm", "--log-level", "debug")
	waitForCatalog(t, f.url(), worker, "ev_echo", "ev_get-env", "ev_get-structured-content", "ev_get-tiny-image",
		"ev_trigger-long-running-operation", "fs_read_text_file")

	coord := f.coordinator("coordinator", script{
		turn(
			call("long", "ev_trigger-long-running-operation", map[string]any{"duration": 2, "steps": 4}),
			call("structured", "ev_get-structured-content", map[string]any{"location": "New York"}),
			call("image", "ev_get-tiny-image", map[string]any{}),
			call("env", "ev_get-env", map[string]any{}),
			call("inside", "fs_read_text_file", map[string]any{"path": filepath.Join(root, "hello.txt")}),
			call("outside", "fs_read_text_file", map[string]any{"path": "/etc/hostname"}),
		),
		final("done"),
	})
	res := coord.result(120*time.Second, 0)
	recs, obs := answered(t, res)
	for id, want := range map[string]string{
		"long":       "Long running operation completed",
		"structured": `"temperature"`,
		"image":      "[image: image/png,",
		"env":        `"EV_SECRET": "[redacted]"`,
		"inside":     "hello from the root",
	} {
		if recs[id].Outcome != "ok" || !strings.Contains(obs[id], want) {
			t.Errorf("%s: outcome %s (%s), observation %.300q; want ok with %q", id, recs[id].Outcome, recs[id].ErrorType, obs[id], want)
		}
	}
	if strings.Contains(obs["image"], "iVBOR") {
		t.Errorf("the image's base64 reached the model: %.200q", obs["image"])
	}
	if recs["outside"].Outcome != "failed" || recs["outside"].ErrorType != "mcptool.ToolError" {
		t.Errorf("a read outside the root: %s %q, want failed mcptool.ToolError (obs %q)", recs["outside"].Outcome, recs["outside"].ErrorType, obs["outside"])
	}
	if !strings.Contains(worker.log(), "mcp server progress") {
		t.Error("the long-running operation sent no progress the worker saw")
	}
	if strings.Contains(coord.stdout.String(), mcpCanary) || strings.Contains(coord.log(), mcpCanary) {
		t.Error("the canary reached the coordinator's result or log")
	}
	if strings.Contains(worker.log(), mcpCanary) {
		t.Error("the canary reached the worker's log")
	}
	scanStreamsFor(t, f.url(), mcpCanary)
}

// TestMCPInspectorCLI lists and calls the fleet's tools through coordinator
// mcp with a third-party client, the MCP Inspector's CLI mode, over stdio
// and over HTTP with a bearer token.
func TestMCPInspectorCLI(t *testing.T) {
	t.Parallel()
	if npmMCP.skip != "" {
		t.Skip(npmMCP.skip)
	}
	inspect := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, inspectorBin(npmMCP.dir), append([]string{"--cli"}, args...)...)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("mcp-inspector %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	// stdio: the inspector starts coordinator mcp (an embedded server and
	// one in-process worker serving the built-ins).
	target := []string{"--", bins.coordinator, "mcp", "--log-level", "warn"}
	if out := inspect(append([]string{"--method", "tools/list"}, target...)...); !strings.Contains(out, `"name": "calculator"`) {
		t.Errorf("tools/list over stdio: %s", out)
	}
	out := inspect(append([]string{"--method", "tools/call", "--tool-name", "calculator", "--tool-arg", "expression=6*7"}, target...)...)
	if !strings.Contains(out, `"text": "42"`) || !strings.Contains(out, `"toolfleet/outcome": "ok"`) {
		t.Errorf("tools/call over stdio: %s", out)
	}

	// HTTP with a bearer token.
	const token = "inspector-token-5e2a"
	p := startProcEnv(t, "coordinator mcp http", []string{"TOOLFLEET_MCP_TOKENS=" + token}, bins.coordinator,
		"mcp", "--transport", "http", "--http-addr", "127.0.0.1:0", "--log-level", "info")
	p.waitLog(60*time.Second, "serving MCP over streamable HTTP")
	var addr string
	for _, l := range p.logLines(func(m map[string]any) bool { return m["message"] == "serving MCP over streamable HTTP" }) {
		addr, _ = l["addr"].(string)
	}
	out = inspect("--method", "tools/call", "--tool-name", "echo", "--tool-arg", "text=over http",
		"--transport", "http", "--header", "Authorization: Bearer "+token, "--", "http://"+addr+"/mcp")
	if !strings.Contains(out, `"text": "over http"`) {
		t.Errorf("tools/call over HTTP: %s", out)
	}
}
