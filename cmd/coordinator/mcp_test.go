package main

import (
	"slices"
	"strings"
	"testing"
)

// coordinator mcp takes only the flags it uses: those of run that do not
// apply (the model's, the round limits) are refused and not listed.
func TestMCPTakesOnlyTheFlagsItUses(t *testing.T) {
	for _, flag := range []string{"--model=openai:gpt-4o", "--model-base-url=http://x", "--previous-response-id",
		"--max-rounds=3", "--max-tool-calls-per-round=2", "--output=json"} {
		t.Run(flag, func(t *testing.T) {
			code, _, stderr := runCLI(t, "mcp", flag)
			name, _, _ := strings.Cut(strings.TrimPrefix(flag, "--"), "=")
			if code != exitUsage || !strings.Contains(stderr, "flag provided but not defined: -"+name) {
				t.Fatalf("exit %d, stderr %q; want %d and the flag refused", code, stderr, exitUsage)
			}
		})
	}
	code, _, help := runCLI(t, "mcp", "--help")
	if code != exitOK {
		t.Fatalf("--help: exit %d", code)
	}
	var listed []string
	for _, line := range strings.Split(help, "\n") {
		if f, ok := strings.CutPrefix(line, "  -"); ok {
			name, _, _ := strings.Cut(f, " ")
			listed = append(listed, name)
		}
	}
	want := append(append([]string{}, mcpFleetFlags...), "transport", "http-addr", "http-path", "no-auth", "disable-localhost-protection",
		"max-concurrent-calls", "allowed-origin", "http-max-conns-per-addr", "http-idle-timeout", "http-read-timeout", "http-write-timeout")
	slices.Sort(want)
	if !slices.Equal(listed, want) {
		t.Fatalf("--help lists %v, want %v", listed, want)
	}
	for _, s := range []string{"NATS server URL", "empty: start an embedded JetStream server", "ADDR", "default 2m0s"} {
		if !strings.Contains(help, s) {
			t.Errorf("--help lost %q:\n%s", s, help)
		}
	}
}
