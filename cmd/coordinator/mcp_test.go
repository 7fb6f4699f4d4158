package main

import (
	"strings"
	"testing"
)

func TestMCPRefusesBadFlags(t *testing.T) {
	t.Setenv(envMCPTokens, "")
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"mcp", "--transport", "sse"}, "--transport must be stdio or http"},
		{[]string{"mcp", "--transport", "http"}, "needs bearer tokens in env TOOLFLEET_MCP_TOKENS"},
		{[]string{"mcp", "--http-path", "mcp"}, "--http-path must start with /"},
		{[]string{"mcp", "extra"}, "takes no arguments"},
		{[]string{"mcp", "--tool-timeout", "0s"}, "--tool-timeout must be > 0"},
	} {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, _, stderr := runCLI(t, tt.args...)
			if code != exitUsage || !strings.Contains(stderr, tt.want) {
				t.Fatalf("exit %d, stderr %q; want %d and %q", code, stderr, exitUsage, tt.want)
			}
		})
	}
}
