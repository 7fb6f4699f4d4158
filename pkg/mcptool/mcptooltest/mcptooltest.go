// Package mcptooltest is a real MCP server for tests, built with the Go SDK:
// its tools succeed, fail, hang, crash, print garbage, return 100 MB or
// change the tool list, so tests can stage every fault against a real
// connection. [Build] builds the command that serves it over stdio.
package mcptooltest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolfleet/toolfleet/pkg/mcptool"
)

// Build builds cmd/mcptestserver (without the race detector, which would
// make its 100 MB answer take a minute) into dir and returns its path. Call
// it in TestMain, before any test's clock starts.
func Build(dir string) (string, error) {
	bin := filepath.Join(dir, "mcptestserver")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/toolfleet/toolfleet/pkg/mcptool/mcptooltest/cmd/mcptestserver")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building mcptestserver: %v\n%s", err, out)
	}
	return bin, nil
}

// StdioConfig is a server config that runs the test server bin in mode,
// with extra environment variables ("K=V").
func StdioConfig(bin, name, mode string, env ...string) mcptool.ServerConfig {
	return mcptool.ServerConfig{
		Name:    name,
		Command: []string{bin, mode},
		Path:    bin,
		Env:     append([]string{"PATH=" + os.Getenv("PATH")}, env...),
	}
}

// Handler serves the normal test server over streamable HTTP (stateless).
// When token is not empty, requests must carry "Authorization: Bearer
// <token>".
func Handler(token string) http.Handler {
	s := NewServer("1")
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, &mcp.StreamableHTTPOptions{Stateless: true})
	if token == "" {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+token {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

var (
	falseV = false
	object = json.RawMessage(`{"type":"object"}`)
	sumOut = json.RawMessage(`{"type":"object","properties":{"sum":{"type":"integer"}},"required":["sum"],"additionalProperties":false}`)
)

func text(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

func args(req *mcp.CallToolRequest) map[string]any {
	var m map[string]any
	_ = json.Unmarshal(req.Params.Arguments, &m)
	return m
}

// EnvToolsFile names the file that the "follow" mode's server reads its
// tool list from.
const EnvToolsFile = "MCPTEST_TOOLS_FILE"

// NewServer returns the test server of mode ("1", "badschema", or
// "follow": a server that lists the tools named, comma-separated, in the
// file $MCPTEST_TOOLS_FILE — none while it is missing or empty — and
// follows its changes with tools/list_changed; each tool answers
// "tool NAME").
func NewServer(mode string) *mcp.Server {
	if mode == "follow" {
		// It has no tools at first: it says it may list some later.
		s := mcp.NewServer(&mcp.Implementation{Name: "mcptooltest", Version: "1"}, &mcp.ServerOptions{
			Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{ListChanged: true}},
		})
		go follow(s, os.Getenv(EnvToolsFile))
		return s
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "mcptooltest", Version: "1"}, nil)
	if mode == "badschema" {
		s.AddTool(&mcp.Tool{Name: "broken", InputSchema: json.RawMessage(`{"type":"object","properties":{"x":{"minimum":"ten"}}}`)},
			func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) { return text("never"), nil })
		return s
	}
	s.AddTool(&mcp.Tool{
		Name: "echo", Description: "Return the text.", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
		InputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`),
	}, func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		t, _ := args(req)["text"].(string)
		return text(t), nil
	})
	s.AddTool(&mcp.Tool{
		Name: "add", Description: "Add two integers.", Annotations: &mcp.ToolAnnotations{IdempotentHint: true, DestructiveHint: &falseV},
		InputSchema:  json.RawMessage(`{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"}},"required":["a","b"]}`),
		OutputSchema: sumOut,
	}, func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		a := args(req)
		sum := int(a["a"].(float64) + a["b"].(float64))
		r := text(fmt.Sprintf(`{"sum":%d}`, sum))
		r.StructuredContent = map[string]any{"sum": sum}
		return r, nil
	})
	s.AddTool(&mcp.Tool{Name: "wrong_output", InputSchema: object, OutputSchema: sumOut},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			r := text(`{"sum":"many"}`)
			r.StructuredContent = map[string]any{"sum": "many"}
			return r, nil
		})
	s.AddTool(&mcp.Tool{Name: "fail", InputSchema: object},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			r := text("the tool failed: /etc/secret-detail")
			r.IsError = true
			return r, nil
		})
	s.AddTool(&mcp.Tool{Name: "image", InputSchema: object},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{
				&mcp.TextContent{Text: "a picture:"},
				&mcp.ImageContent{MIMEType: "image/png", Data: make([]byte, 2048)},
			}}, nil
		})
	s.AddTool(&mcp.Tool{Name: "env", InputSchema: json.RawMessage(`{"type":"object","properties":{"name":{"type":"string"}}}`)},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			n, _ := args(req)["name"].(string)
			return text(n + "=" + os.Getenv(n)), nil
		})
	s.AddTool(&mcp.Tool{Name: "pid", InputSchema: object, Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return text(fmt.Sprint(os.Getpid())), nil
		})
	s.AddTool(&mcp.Tool{Name: "hang", Description: "Ignore cancellation and never return.", InputSchema: object},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			time.Sleep(time.Hour)
			return text("late"), nil
		})
	s.AddTool(&mcp.Tool{Name: "wait", Description: "Wait until cancelled.", InputSchema: object},
		func(ctx context.Context, _ *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		})
	s.AddTool(&mcp.Tool{Name: "crash", InputSchema: object},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			os.Exit(3)
			return nil, nil
		})
	s.AddTool(&mcp.Tool{Name: "garbage", InputSchema: object},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			fmt.Fprintln(os.Stdout, "this is not JSON-RPC")
			time.Sleep(time.Hour)
			return text("late"), nil
		})
	s.AddTool(&mcp.Tool{Name: "big", InputSchema: json.RawMessage(`{"type":"object","properties":{"mb":{"type":"integer"}}}`)},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			mb, _ := args(req)["mb"].(float64)
			return text(strings.Repeat("x", int(mb)<<20)), nil
		})
	s.AddTool(&mcp.Tool{Name: "add_tool", InputSchema: json.RawMessage(`{"type":"object","properties":{"name":{"type":"string"}}}`)},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			n, _ := args(req)["name"].(string)
			s.AddTool(&mcp.Tool{Name: n, InputSchema: object, Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
				func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
					return text("new tool " + n), nil
				})
			return text("added"), nil
		})
	return s
}

// follow keeps s's tools the names listed in the file at path, read every
// 50ms (the test server's own polling; a test waits for what it causes).
func follow(s *mcp.Server, path string) {
	served := map[string]bool{}
	for {
		data, _ := os.ReadFile(path)
		want := map[string]bool{}
		for _, n := range strings.Split(strings.TrimSpace(string(data)), ",") {
			if n = strings.TrimSpace(n); n != "" {
				want[n] = true
			}
		}
		for n := range served {
			if !want[n] {
				s.RemoveTools(n)
				delete(served, n)
			}
		}
		for n := range want {
			if !served[n] {
				s.AddTool(&mcp.Tool{Name: n, InputSchema: object},
					func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
						return text("tool " + n), nil
					})
				served[n] = true
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
}
