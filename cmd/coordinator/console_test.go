package main

import (
	"strings"
	"testing"
)

// TestConsoleRefusesBadFlags: flags that cannot work are usage errors
// (exit 2) naming the flag, before anything starts.
func TestConsoleRefusesBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--addr", "nowhere"}, "--addr nowhere"},
		{[]string{"--max-streams", "0"}, "--max-streams must not be 0"},
		{[]string{"--session-idle-timeout", "0s"}, "--session-idle-timeout must not be 0"},
		{[]string{"extra"}, `takes no arguments, got "extra"`},
	} {
		code, _, stderr := runCLI(t, append([]string{"console"}, tc.args...)...)
		if code != exitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("console %v: exit %d, stderr %q; want 2 saying %q", tc.args, code, stderr, tc.want)
		}
	}
}
