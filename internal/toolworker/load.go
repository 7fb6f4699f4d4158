package toolworker

import (
	"github.com/toolfleet/toolfleet/pkg/config"
	"github.com/toolfleet/toolfleet/pkg/harness"
	"github.com/toolfleet/toolfleet/pkg/mcptool"
	"github.com/toolfleet/toolfleet/pkg/worker"
)

// Load returns cfg with the tools of the manifest at path (when set: its
// exec tools and its MCP servers, whose variables getenv resolves) and
// the built-in tools builtins names added to its Tools and MCPServers.
// Errors are [config.Error]s of the field "ToolsFile" or "Builtins".
func Load(cfg worker.Config, path string, builtins []string, getenv func(string) string) (worker.Config, error) {
	if path != "" {
		t, err := harness.LoadManifest(path)
		if err != nil {
			return cfg, &config.FieldError{Field: "ToolsFile", Err: err}
		}
		servers, err := mcptool.LoadManifest(path, getenv)
		if err != nil {
			return cfg, &config.FieldError{Field: "ToolsFile", Err: err}
		}
		cfg.Tools, cfg.MCPServers = append(cfg.Tools, t...), append(cfg.MCPServers, servers...)
	}
	if len(builtins) > 0 {
		t, err := harness.Builtins(builtins)
		if err != nil {
			return cfg, &config.FieldError{Field: "Builtins", Err: err}
		}
		cfg.Tools = append(cfg.Tools, t...)
	}
	return cfg, nil
}
