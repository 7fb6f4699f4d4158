package coordinator_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/toolfleet/toolfleet/internal/coordinator"
	"github.com/toolfleet/toolfleet/pkg/loop"
	"github.com/toolfleet/toolfleet/pkg/protocol"
)

// everyToolModel calls each of tools once in its first round, whatever the
// request offers, and then answers "done".
type everyToolModel struct {
	tools []string

	mu    sync.Mutex
	round int
}

func (m *everyToolModel) Complete(ctx context.Context, req loop.Request) (*loop.Response, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.round++
	if m.round > 1 {
		return &loop.Response{Message: loop.Message{Role: "assistant", Content: "done"}, FinishReason: "stop"}, nil
	}
	msg := loop.Message{Role: "assistant"}
	for i, name := range m.tools {
		args := `{}`
		switch name {
		case "calculator":
			args = `{"expression":"1+1"}`
		case "echo":
			args = `{"text":"hi"}`
		}
		msg.ToolCalls = append(msg.ToolCalls, loop.ToolCall{
			ID: fmt.Sprintf("call_%d", i), Type: "function",
			Function: loop.FunctionCall{Name: name, Arguments: args},
		})
	}
	return &loop.Response{Message: msg, FinishReason: "tool_calls"}, nil
}

// TestFirstRoundSeesEveryInProcessTool opens an embedded coordinator with a
// manifest and built-ins many times; each first round calls
// every tool the in-process worker serves, and none may be answered
// unknown_tool: Open waits until the catalog lists all of them, not just
// the first one a worker published.
func TestFirstRoundSeesEveryInProcessTool(t *testing.T) {
	const manifestTools = 12
	var tools []string
	var manifest struct {
		Tools []map[string]any `json:"tools"`
	}
	for i := range manifestTools {
		name := fmt.Sprintf("tool%02d", i)
		tools = append(tools, name)
		manifest.Tools = append(manifest.Tools, map[string]any{
			"name": name, "description": "prints nothing", "command": []string{"true"}, "idempotent": true,
		})
	}
	tools = append(tools, "calculator", "echo")
	data, err := json.Marshal(manifest)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "tools.json")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}

	runs := 15
	if testing.Short() {
		runs = 3
	}
	// Each run opens its own embedded server and store, so they run in
	// parallel: most of an Open is waiting on the server and the worker.
	for i := range runs {
		t.Run(fmt.Sprintf("run%d", i), func(t *testing.T) {
			t.Parallel()
			c, err := coordinator.Open(t.Context(), coordinator.Config{
				Model:     &everyToolModel{tools: tools},
				ToolsFile: path,
				Builtins:  []string{"calculator", "echo"},
				StoreDir:  t.TempDir(),
			})
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			res, err := c.Run(t.Context(), "call every tool")
			c.Close()
			if err != nil {
				t.Fatal(err)
			}
			if n := res.Metadata.Outcomes[protocol.OutcomeUnknownTool]; n != 0 {
				t.Fatalf("%d of %d calls answered unknown_tool (outcomes %v)", n, len(tools), res.Metadata.Outcomes)
			}
			if n := res.Metadata.Outcomes[protocol.OutcomeOK]; n != len(tools) {
				t.Fatalf("%d calls ok, want %d (outcomes %v)", n, len(tools), res.Metadata.Outcomes)
			}
		})
	}
}
